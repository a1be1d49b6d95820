// Multi-token prediction (DeepSeek-V3 §2.2, Megatron-core's MultiTokenPredictionLayer):
// each depth's parameters, FLOPs and place in the pipeline written out by hand for a small
// model, the layout string's 'm', and the refusals.
#include <catch2/catch.hpp>

#include <string>

#include "job_fixtures.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/pipeline_layout.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using partune::testing::scenario_error_key;

namespace {

// A LLaMA-style block: RMSNorm (a scale of h), multi-head attention without biases (4 h^2),
// SwiGLU (3 h f), rotary positions, an untied head.
constexpr double h = 64, f = 160, V = 1000, s = 32, H = 4;
const std::string kModel =
    "{layers: 4, hidden: 64, heads: 4, ffn_hidden: 160, vocab: 1000, seq_len: 32, norm: rmsnorm, mlp: swiglu,\n"
    " bias: false, positions: rope, dropout: 0, tied_embeddings: false";

std::string job_text(const std::string& model_extra, const std::string& parallel) {
  return "kind: job\nname: mtp\nmodel: " + kModel + model_extra +
         "}\ncluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
         "training: {global_batch: 16, precision: bf16, optimizer: adam}\n"
         "parallel: {" + parallel + "}\n";
}

Job job(const std::string& model_extra, const std::string& parallel = "pipeline_parallel_degree: 2, microbatches: 4, data_parallel_degree: 4") {
  return parse_job(job_text(model_extra, parallel), "mtp.yaml");
}

std::string refusal(const std::string& model_extra, const std::string& parallel) {
  try {
    job(model_extra, parallel);
  } catch (const ScenarioError& e) {
    return std::string(e.what());
  }
  return "accepted";
}

}  // namespace

TEST_CASE("an MTP depth's parameters: two norms, the 2h -> h projection, one layer, its final norm", "[mtp][plan]") {
  const ModelSpec plain = job("").model, mtp = job(", mtp_layers: 1").model;
  REQUIRE(mtp.mtp_layers == 1);
  const double layer = 4 * h * h + 3 * h * f + 2 * h;  // attention, SwiGLU, its two norms
  CHECK(layer_parameters(plain, false) == layer);
  // enorm and hnorm (h each), eh_proj (2h x h, no bias), the layer, the final norm (h); the
  // embedding and the output head are the main model's (not counted again).
  const double depth = 2 * h + 2 * h * h + layer + h;
  CHECK(total_parameters(mtp) - total_parameters(plain) == depth);
  CHECK(total_parameters(job(", mtp_layers: 2").model) - total_parameters(plain) == 2 * depth);
  CHECK(active_parameters(mtp) - active_parameters(plain) == depth);
}

TEST_CASE("an MTP depth's FLOPs a token: the projection, one layer, the output head again", "[mtp][flops]") {
  const ModelSpec plain = job("").model, mtp = job(", mtp_layers: 1").model;
  // Forward: 2 a weight (projection 2h h, attention 4h^2, SwiGLU 3hf, logits hV) and the
  // core's Q K^T and scores x V over s keys and h = H d per token (2 s H (d + d)); backward
  // twice the forward.
  const double d = h / H;
  const double layer = 2 * (4 * h * h + 3 * h * f) + 2 * s * H * (d + d);
  const double added = 3 * (2 * 2 * h * h + layer + 2 * h * V);
  CHECK((model_flops_per_step(mtp, 1) - model_flops_per_step(plain, 1)) / s == Approx(added).epsilon(1e-12));
  // The head plan holds the depth: its GEMMs and attention core, and a second cross-entropy.
  const LayerPlan head = head_plan(mtp, PlanConfig{});
  int losses = 0;
  for (const PlanOp& op : head.ops) losses += op.role == PlanOpRole::loss;
  CHECK(losses == 2);
  CHECK(head.attention_flops() == Approx(s * 2 * s * H * (d + d)));
}

TEST_CASE("MTP with tensor and sequence parallelism: the layer split like the others, the edges Megatron's",
          "[mtp][plan][tensor]") {
  const ModelSpec mtp = job(", mtp_layers: 1").model;
  PlanConfig c;
  c.tensor_degree = 2;
  c.sequence_parallel = true;
  c.precision = Precision::bf16;
  const LayerPlan head = head_plan(mtp, c), plain_head = head_plan(job("").model, c);
  const LayerPlan layer = transformer_layer_plan(mtp, c);
  // One rank's parameters: the layer's, eh_proj's column shard (2h x h/2), the three norms
  // whole.
  CHECK(head.params() - plain_head.params() == Approx(layer.params() + 2 * h * h / 2 + 3 * h));
  // The projection's edges: its 2h-wide input gathered from the sequence shards (2 b s h
  // bytes: S of 2 x 32 x 128 B), its output columns gathered, the sequence shard taken.
  const double S = s * h * 2;  // one micro-batch's hidden state in bf16
  CHECK(head.op(PlanOpRole::mtp_projection_in).conjugate == Conjugate::sp_gather);
  CHECK(head.op(PlanOpRole::mtp_projection_in).comm_bytes == 2 * S);
  CHECK(head.op(PlanOpRole::mtp_gather).conjugate == Conjugate::gather);
  CHECK(head.op(PlanOpRole::mtp_split).conjugate == Conjugate::split);
  const LayerPlan& p = head;
  const auto count = [&](PlanPass pass, CollectiveKind kind) {
    int n = 0;
    for (const TensorCollective& tc : tensor_collectives(p, pass))
      if (tc.kind == kind) n += tc.count;
    return n;
  };
  // Forward all-gathers: the head's entry (2: main and MTP), the layer's two entries, the
  // projection's input and its output columns; reduce-scatters: the embedding's and the
  // layer's two exits.
  CHECK(count(PlanPass::forward, CollectiveKind::all_gather) == 2 + 2 + 1 + 1);
  CHECK(count(PlanPass::forward, CollectiveKind::reduce_scatter) == 1 + 2);
  // Backward: every sp_gather's reduce-scatter and re-gather, each sp_scatter's all-gather,
  // the split's all-gather; the output columns' gather splits (no collective).
  CHECK(count(PlanPass::backward, CollectiveKind::reduce_scatter) == 2 + 2 + 1);
  CHECK(count(PlanPass::backward, CollectiveKind::all_gather) == (2 + 2 + 1) + (1 + 2) + 1);
}

TEST_CASE("MTP sits on the head's stage, with a copy of the shared embedding", "[mtp][pipeline]") {
  const Job plain = job(""), mtp = job(", mtp_layers: 1");
  const double depth = 2 * h + 2 * h * h + (4 * h * h + 3 * h * f + 2 * h) + h;
  CHECK(stage_parameter_count(mtp, 0) == stage_parameter_count(plain, 0));
  // The last stage: the depth and the token table (V x h), whose gradient it sums with the
  // first stage's, as a tied embedding's.
  CHECK(stage_parameter_count(mtp, 1) - stage_parameter_count(plain, 1) == depth + V * h);
  CHECK(mtp.tied_embedding_copies());
  CHECK(stage_memory(mtp, 1).logits > stage_memory(plain, 1).logits);
  // A layout puts the 'm' in the last chunk, before the loss.
  const PipelineLayout layout = parse_pipeline_layout("Ett|ttmL");
  CHECK(layout.chunk_layers == std::vector<int>{2, 2});
  CHECK(layout.mtp_layers == 1);
  const Job laid = job(", mtp_layers: 1", "pipeline_parallel_degree: 2, microbatches: 4, data_parallel_degree: 4, "
                                          "pipeline_layout: \"Ett|ttmL\"");
  CHECK(laid.parallel.stage_layers == std::vector<int>{2, 2});
  CHECK(stage_parameter_count(laid, 1) == stage_parameter_count(mtp, 1));
  CHECK(parse_pipeline_layout("Et|t|t|tmmL").mtp_layers == 2);
  CHECK_THROWS_AS(parse_pipeline_layout("Etm|ttL"), std::invalid_argument);
}

TEST_CASE("MTP refusals name the file, the key and the reason", "[mtp][bad_input]") {
  CHECK(scenario_error_key(job_text(", mtp_layers: -1", "microbatches: 1, data_parallel_degree: 8"), "mtp.yaml") ==
        "model.mtp_layers");
  const std::string pp = "pipeline_parallel_degree: 2, microbatches: 4, data_parallel_degree: 4, ";
  // 'm' outside the last chunk.
  CHECK_THAT(refusal(", mtp_layers: 1", pp + "pipeline_layout: \"Etm|ttL\""),
             Catch::Contains("mtp.yaml") && Catch::Contains("parallel.pipeline_layout") &&
                 Catch::Contains("belongs in the last chunk"));
  // A layout's 'm' on a model without MTP, and the counts apart.
  CHECK_THAT(refusal("", pp + "pipeline_layout: \"Ett|ttmL\""),
             Catch::Contains("parallel.pipeline_layout") && Catch::Contains("the model has none"));
  CHECK_THAT(refusal(", mtp_layers: 2", pp + "pipeline_layout: \"Ett|ttmL\""),
             Catch::Contains("parallel.pipeline_layout") && Catch::Contains("mtp_layers 2"));
  CHECK_THAT(refusal(", mtp_layers: 1", pp + "pipeline_layout: \"Ett|ttL\""),
             Catch::Contains("has 0 multi-token-prediction layers"));
}
