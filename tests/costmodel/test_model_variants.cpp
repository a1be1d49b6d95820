// LLaMA-style blocks (SwiGLU, RMSNorm, rotary positions, no biases, grouped-query
// attention): the presets' parameter counts against the published ones, the FLOPs per
// token against the closed form written out here, and the model file's new keys.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "scenario_errors.hpp"

using namespace partune;
using partune::testing::expect_scenario_error;

// Published sizes: the Hugging Face configs' parameter counts (the model cards, and for
// 405B the Llama 3 paper's Table 3 model as released), cited in each preset's header.
TEST_CASE("LLaMA presets have their published parameter counts", "[model][llama]") {
  const std::pair<const char*, double> published[] = {
      {"llama-2-7b", 6'738'415'616.0},  {"llama-2-13b", 13'015'864'320.0}, {"llama-2-70b", 68'976'648'192.0},
      {"llama-3-8b", 8'030'261'248.0},  {"llama-3-70b", 70'553'706'496.0}, {"llama-3-405b", 405'853'388'800.0}};
  for (const auto& [name, count] : published) {
    INFO(name);
    const ModelSpec m = load_model(name);
    CHECK(total_parameters(m) == Approx(count).epsilon(0.01));
    CHECK(total_parameters(m) == Approx(count).epsilon(1e-9));  // exact, in fact
  }
}

// LLaMA-2 7B by hand: a layer is Q, K, V, O (4 h^2), gate, up, down (3 h f) and two RMS
// norms (h each); the embedding and the untied head are V h each, plus the final norm.
TEST_CASE("LLaMA-2 7B counts, layer by layer, as written out", "[model][llama]") {
  const ModelSpec m = load_model("llama-2-7b");
  const double h = 4096, f = 11008, V = 32000, L = 32;
  CHECK(layer_parameters(m, false) == 4 * h * h + 3 * h * f + 2 * h);
  CHECK(embedding_parameters(m) == V * h);  // rotary positions: no table
  CHECK(head_parameters(m) == V * h + h);
  CHECK(total_parameters(m) == L * (4 * h * h + 3 * h * f + 2 * h) + 2 * V * h + h);
  // One rank of 8 (Megatron-LM's split): the matrices and the vocabulary over the tensor
  // group, the two RMS norms and the final one whole on every rank.
  PlanConfig c;
  c.tensor_degree = 8;
  const LayerPlan layer = transformer_layer_plan(m, c);
  const RankParameters r = rank_parameters(layer, layer, embedding_plan(m, c), head_plan(m, c));
  CHECK(r.dense_layer == (4 * h * h + 3 * h * f) / 8 + 2 * h);
  CHECK(r.embedding == V * h / 8);
  CHECK(r.head == V * h / 8 + h);
}

// Forward FLOPs per token: 2 per multiply-add of every matrix (Q, K, V, O: 4 h^2 with
// kv_heads = heads; gate, up, down: 3 h f), attention's Q K^T and scores x V over the
// whole sequence (2 s h each, causal masking not subtracted, as the plan counts it) and
// the logits (2 h V); training = 3 x forward.
TEST_CASE("LLaMA-2 7B training FLOPs per token equal the closed form", "[model][llama][flops]") {
  const ModelSpec m = load_model("llama-2-7b");
  const double h = 4096, f = 11008, V = 32000, L = 32, s = 4096;
  const double forward_per_token = L * (2 * 4 * h * h + 2 * 3 * h * f + 4 * s * h) + 2 * h * V;
  CHECK(model_flops_per_step(m, 1) / s == Approx(3 * forward_per_token).epsilon(1e-12));
  // The familiar estimate: 6 FLOPs per parameter that multiplies (all but the embedding
  // table and the 2 L + 1 norms: 6 x 6.607e9 = 3.964e10) plus attention's 12 L s h
  // (6.44e9) = 4.608e10.
  CHECK(3 * forward_per_token ==
        Approx(6 * (6'738'415'616.0 - V * h - (2 * L + 1) * h) + 12 * L * s * h).epsilon(1e-12));
  CHECK(3 * forward_per_token == Approx(4.6085e10).epsilon(1e-4));
}

// Grouped-query attention: K and V have kv_heads x head_dim columns.
TEST_CASE("LLaMA-2 70B's grouped-query projections are sized by kv_heads", "[model][llama]") {
  const ModelSpec m = load_model("llama-2-70b");
  const double h = 8192, kv = 8 * 128, f = 28672;
  CHECK(m.kv_heads == 8);
  CHECK(layer_parameters(m, false) == h * (h + 2 * kv) + h * h + 3 * h * f + 2 * h);
  PlanConfig c;
  c.sequences = 1;
  c.tensor_degree = 8;
  const LayerPlan plan = transformer_layer_plan(m, c);
  CHECK(plan.op(PlanOpRole::qkv).n == (h + 2 * kv) / 8);
  CHECK(plan.op(PlanOpRole::fc1).n == 2 * f / 8);  // gate and up side by side
  CHECK(plan.find(PlanOpRole::rotary) != nullptr);
  CHECK(plan.params() == (h * (h + 2 * kv) + h * h + 3 * h * f) / 8 + 2 * h);
}

TEST_CASE("the GPT block keeps its counts: layernorm, gelu, learned positions, biases", "[model]") {
  const ModelSpec m = load_model("gpt2-small");
  const double h = 768, f = 3072;
  CHECK(layer_parameters(m, false) == 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h);
  CHECK(embedding_parameters(m) == 50257 * h + 1024 * h);
  PlanConfig c;
  c.sequences = 1;
  CHECK(transformer_layer_plan(m, c).find(PlanOpRole::rotary) == nullptr);
  CHECK_THROWS_WITH(transformer_layer_plan(m, c).op(PlanOpRole::rotary),
                    "layer plan: the layer plan has no rotary op");
  // One rank of 4: QKV's and fc1's weights and biases and the projection's and fc2's
  // weights split; the projection's and fc2's biases and the two layer norms whole.
  c.tensor_degree = 4;
  CHECK(transformer_layer_plan(m, c).params() == (4 * h * h + 3 * h + 2 * h * f + f) / 4 + 2 * h + 4 * h);
}

namespace {

// A one-node job whose model is given inline with `extra` keys.
std::string job_with_model(const std::string& extra) {
  return "kind: job\nname: inline\nmodel:\n  name: x\n  layers: 2\n  hidden: 64\n  heads: 4\n  vocab: 100\n"
         "  seq_len: 16\n" + extra +
         "cluster: {instance_type: p4d.24xlarge, nodes: 1}\ntraining: {global_batch: 8, precision: bf16}\n";
}

}  // namespace

TEST_CASE("the block's keys are read, written back and refused when wrong", "[model][scenario]") {
  const Job j = parse_job(job_with_model("  mlp: swiglu\n  norm: rmsnorm\n  positions: rope\n  bias: false\n"),
                          "inline.yaml");
  CHECK(j.model.mlp == MlpKind::swiglu);
  CHECK(j.model.norm == NormKind::rmsnorm);
  CHECK(j.model.positions == PositionKind::rope);
  CHECK_FALSE(j.model.bias);
  // Written as a job file and read again: the same block.
  const Job again = parse_job(job_yaml(j, "round trip"), "again.yaml");
  CHECK(again.model.mlp == MlpKind::swiglu);
  CHECK(again.model.norm == NormKind::rmsnorm);
  CHECK(again.model.positions == PositionKind::rope);
  CHECK_FALSE(again.model.bias);
  CHECK(total_parameters(again.model) == total_parameters(j.model));
  // Left out: GPT's block.
  const Job gpt = parse_job(job_with_model(""), "inline.yaml");
  CHECK(gpt.model.mlp == MlpKind::gelu);
  CHECK(gpt.model.norm == NormKind::layernorm);
  CHECK(gpt.model.positions == PositionKind::learned);
  CHECK(gpt.model.bias);
  try {
    parse_job(job_with_model("  mlp: relu\n"), "inline.yaml");
    FAIL("mlp: relu was accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "model.mlp");
    CHECK(std::string(e.what()).find("swiglu") != std::string::npos);
  }
}

namespace {

const std::string kHf = std::string(PARTUNE_SOURCE_DIR) + "/tests/costmodel/data/hf/";

// A job whose model is the Hugging Face config `file` (tests/costmodel/data/hf/, copies of
// the public configs), with `extra` keys beside from_hf.
Job hf_job(const std::string& file, const std::string& extra = "") {
  return parse_job("kind: job\nname: hf\nmodel:\n  from_hf: " + kHf + file + "\n" + extra +
                       "cluster: {instance_type: p4d.24xlarge, nodes: 1}\ntraining: {global_batch: 8, precision: bf16}\n",
                   "hf-job.yaml");
}

ScenarioError hf_error(const std::string& file) {
  return expect_scenario_error([&] { hf_job(file); }, file);
}

}  // namespace

TEST_CASE("from_hf reads LLaMA, Mistral and GPT-2 configs into the same models as the presets", "[model][hf]") {
  const ModelSpec llama = hf_job("llama-2-7b.json").model;
  const ModelSpec preset = load_model("llama-2-7b");
  CHECK(total_parameters(llama) == total_parameters(preset));
  CHECK(llama.layers == 32);
  CHECK(llama.ffn_hidden == 11008);
  CHECK(llama.seq_len == 4096);  // max_position_embeddings
  CHECK(llama.mlp == MlpKind::swiglu);
  CHECK(llama.norm == NormKind::rmsnorm);
  CHECK(llama.positions == PositionKind::rope);
  CHECK_FALSE(llama.bias);
  CHECK_FALSE(llama.tied_embeddings);
  CHECK(llama.attention == AttentionKind::mha);
  // Mistral 7B: grouped-query (8 key/value heads); published 7,241,732,096 parameters.
  const ModelSpec mistral = hf_job("mistral-7b.json", "  seq_len: 4096\n").model;
  CHECK(mistral.attention == AttentionKind::gqa);
  CHECK(mistral.kv_heads == 8);
  CHECK(mistral.seq_len == 4096);  // set beside from_hf, over the config's 32768
  CHECK(total_parameters(mistral) == 7'241'732'096.0);
  // GPT-2: the GPT block with learned positions and a tied head, as the gpt2-small preset.
  const ModelSpec gpt2 = hf_job("gpt2.json").model;
  CHECK(total_parameters(gpt2) == total_parameters(load_model("gpt2-small")));
  CHECK(gpt2.positions == PositionKind::learned);
  CHECK(gpt2.tied_embeddings);
}

TEST_CASE("from_hf reads Mixtral's experts as the preset has them", "[model][hf][moe]") {
  const ModelSpec mixtral = hf_job("mixtral-8x7b.json").model;
  CHECK(mixtral.experts == 8);
  CHECK(mixtral.experts_per_token == 2);
  CHECK(mixtral.expert_ffn_hidden == 14336);
  CHECK(total_parameters(mixtral) == total_parameters(load_model("mixtral-8x7b")));
}

TEST_CASE("from_hf refuses what it cannot describe, naming the file and the field", "[model][hf]") {
  const ScenarioError unknown = hf_error("unknown.json");
  CHECK(unknown.key() == "architectures");
  CHECK(std::string(unknown.what()).find("FalconForCausalLM") != std::string::npos);
  const ScenarioError heads = hf_error("bad-heads.json");
  CHECK(heads.key() == "num_key_value_heads");
  const ScenarioError missing = hf_error("no-such-config.json");
  CHECK(missing.key() == "model.from_hf");
  // Beside from_hf only name, seq_len and dropout may be given.
  try {
    hf_job("llama-2-7b.json", "  hidden: 128\n");
    FAIL("hidden beside from_hf was accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "model.hidden");
  }
}
