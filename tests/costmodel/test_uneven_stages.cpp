// Uneven pipeline stages (parallel.stage_layers): loading and checks, memory per stage,
// the estimator's per-stage slots and the programs' layers per stage, against hand
// numbers.
//
// Hand numbers for GPT-2 small (cut to 8 layers here): gpt2_small_hand.hpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "gpt2_small_hand.hpp"
#include "job_fixtures.hpp"
#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using namespace partune::testing::gpt2_small;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {


// GPT-2 small with 8 layers on one p4d node: pp 2 x tp 1 -> dp 4, 4 micro-batches of 1.
Job uneven_job(std::vector<int> stage_layers, int pp = 2, int tp = 1, int micro = 4) {
  Job j = p4d_job("gpt2-small", 1, 8 / (pp * tp) * micro);
  j.model.layers = 8;
  j.parallel.pipeline_parallel_degree = pp;
  j.parallel.tensor_parallel_degree = tp;
  j.parallel.microbatches = micro;
  j.parallel.stage_layers = std::move(stage_layers);
  return j;
}

std::string yaml(const std::string& parallel_extra) {
  return "model: gpt2-small\n"
         "cluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
         "training: {global_batch: 16, precision: fp16}\n"
         "parallel:\n"
         "  pipeline_parallel_degree: 2\n"
         "  microbatches: 4\n" +
         parallel_extra;
}

std::string error_key(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return partune::testing::scenario_error_key(text, "uneven.yaml", overrides);
}

}  // namespace

TEST_CASE("stage_layers loads from YAML and from --set", "[uneven][scenario]") {
  const Job j = parse_job(yaml("  stage_layers: [5, 7]\n"), "uneven.yaml");
  CHECK(j.parallel.stage_layers == std::vector<int>{5, 7});
  CHECK(j.layers_on_stage(0) == 5);
  CHECK(j.layers_on_stage(1) == 7);
  CHECK(j.layers_in_chunk(1, 0) == 7);
  CHECK(j.global_layer(1, 0, 0) == 5);
  CHECK(j.global_layer(1, 0, 6) == 11);
  // --set takes the value as YAML, dotted or bare.
  CHECK(parse_job(yaml(""), "uneven.yaml", {"parallel.stage_layers=[10,2]"}).parallel.stage_layers ==
        std::vector<int>{10, 2});
  CHECK(parse_job(yaml(""), "uneven.yaml", {"stage_layers=[3, 9]"}).layers_on_stage(1) == 9);
  // Null restores the default: uniform stages.
  const Job uniform = parse_job(yaml("  stage_layers: [5, 7]\n"), "uneven.yaml", {"stage_layers="});
  CHECK(uniform.parallel.stage_layers.empty());
  CHECK(uniform.layers_on_stage(0) == 6);
  CHECK(uniform.layers_on_stage(1) == 6);
  // Uniform interleaved stages: chunk c of stage s is model stage c p + s.
  Job inter = uneven_job({}, 2, 1, 4);
  inter.parallel.virtual_stages = 2;
  require_valid(inter);
  CHECK(inter.layers_in_chunk(1, 1) == 2);
  CHECK(inter.global_layer(1, 1, 1) == (1 * 2 + 1) * 2 + 1);
}

TEST_CASE("stage_layers errors name parallel.stage_layers", "[uneven][scenario]") {
  CHECK(error_key(yaml("  stage_layers: [12]\n")) == "parallel.stage_layers");          // one entry per stage
  CHECK(error_key(yaml("  stage_layers: [4, 4, 4]\n")) == "parallel.stage_layers");
  CHECK(error_key(yaml("  stage_layers: [0, 12]\n")) == "parallel.stage_layers");       // each >= 1
  CHECK(error_key(yaml("  stage_layers: [5, 8]\n")) == "parallel.stage_layers");        // sum = layers
  CHECK(error_key(yaml("  stage_layers: [6, 6]\n  virtual_stages: 2\n")) == "parallel.stage_layers");
  CHECK(error_key(yaml("  stage_layers: 6\n")) == "parallel.stage_layers");             // not a list
  CHECK(error_key(yaml("  stage_layers: [6, six]\n")) == "parallel.stage_layers");
  CHECK(error_key(yaml(""), {"stage_layers=[1,2]"}) == "parallel.stage_layers");
  // Uneven stages lift the divisibility rule: 12 layers over 5 stages.
  Job j = uneven_job({2, 2, 3, 2, 3}, 5, 1, 5);
  j.model.layers = 12;
  j.cluster.nodes = 5;
  j.training.global_batch = 40;
  require_valid(j);
  j.parallel.stage_layers.clear();
  CHECK(check_job(j).key == "parallel.pipeline_parallel_degree");
}

TEST_CASE("uneven stages: memory per stage from its own layers", "[uneven][memory]") {
  // [2, 6]: 1F1B holds 2 micro-batches on stage 0 and 1 on stage 1 (p - s).
  const Job j = uneven_job({2, 6});
  require_valid(j);
  REQUIRE(j.microbatch_size() == 1);
  const MemoryBreakdown s0 = stage_memory(j, 0), s1 = stage_memory(j, 1);
  const double p0 = 2 * kLayerParams + kEmbeddingParams;
  const double p1 = 6 * kLayerParams + kHeadParams + kTiedCopy;
  CHECK(stage_parameter_count(j, 0) == Approx(p0).epsilon(1e-12));
  CHECK(stage_parameter_count(j, 1) == Approx(p1).epsilon(1e-12));
  CHECK(s0.parameters == Approx(2 * p0).epsilon(1e-12));  // fp16 weights
  CHECK(s1.parameters == Approx(2 * p1).epsilon(1e-12));
  CHECK(s0.optimizer_states == Approx(12 * p0).epsilon(1e-12));  // fp32 master + Adam moments
  CHECK(s0.activations == Approx(2 * 2 * kLayerActivations).epsilon(1e-12));
  CHECK(s1.activations == Approx(1 * 6 * kLayerActivations).epsilon(1e-12));
  CHECK(s0.logits == 0);
  CHECK(s1.logits == Approx(kLogits).epsilon(1e-12));
  // The larger stage decides whether the job fits.
  CHECK(peak_memory(j).stage == (s1.total() > s0.total() ? 1 : 0));
  CHECK(peak_memory(j).total() == Approx(std::max(s0.total(), s1.total())).epsilon(1e-12));
}

TEST_CASE("uneven stages: a middle stage can be the largest", "[uneven][memory]") {
  // pp 4 over 8 layers as [1, 5, 1, 1], b 1: stage 1 holds p - s = 3 micro-batches of 5
  // layers (15 layer-activations, 1.34 GB, plus 5 layers of model states, 0.57 GB),
  // stage 0 4 x 1 (0.36 GB, plus 0.74 GB of states with the embedding), the last stage
  // 1 x 1 plus one micro-batch of logits (0.40 GB, plus 0.73 GB with its embedding copy).
  const Job j = uneven_job({1, 5, 1, 1}, 4, 1, 4);
  require_valid(j);
  REQUIRE(j.microbatch_size() == 1);
  CHECK(stage_memory(j, 1).activations == Approx(15 * kLayerActivations).epsilon(1e-12));
  CHECK(stage_memory(j, 0).activations == Approx(4 * kLayerActivations).epsilon(1e-12));
  CHECK(stage_memory(j, 3).activations == Approx(1 * kLayerActivations).epsilon(1e-12));
  CHECK(stage_memory(j, 1).parameters == Approx(2 * 5 * kLayerParams).epsilon(1e-12));
  const MemoryBreakdown peak = peak_memory(j);
  CHECK(peak.stage == 1);
  CHECK(peak.total() == Approx(stage_memory(j, 1).total()).epsilon(1e-12));
}

TEST_CASE("uneven stages: the slowest slot paces, the others fill and drain", "[uneven][estimator]") {
  // pp 2, tp 1: no tensor-parallel all-reduces, so a stage's slot is its kernels alone:
  //   slot_0 = 2 (F + B) + embedding forward and backward
  //   slot_1 = 6 (F + B) + LM head forward and backward
  // The step's compute is m slot_max per pass and the bubble the other slot once per pass
  // (twice with two accumulation passes).
  for (int ga : {1, 2}) {
    for (const std::vector<int>& split : {std::vector<int>{2, 6}, std::vector<int>{6, 2}, std::vector<int>{4, 4}}) {
      Job j = uneven_job(split);
      j.training.gradient_accumulation = ga;
      j.training.global_batch *= ga;
      require_valid(j);
      INFO("split " << split[0] << "," << split[1] << " ga " << ga);
      const GpuProfile& gpu = j.cluster.instance.gpu;
      const LayerTime lt = layer_time(gpu, j.model, Precision::fp16, 1, 1, false);
      const HeadTime ht = head_time(gpu, j.model, Precision::fp16, 1, 1);
      const double F = lt.forward(), B = lt.backward();
      const double slot0 = split[0] * (F + B) + ht.embedding_fwd + ht.embedding_bwd;
      const double slot1 = split[1] * (F + B) + ht.logits_fwd + ht.logits_bwd;
      const double slow = std::max(slot0, slot1), fast = std::min(slot0, slot1);
      const Estimate e = estimate(j);
      CHECK(e.breakdown.compute == Approx(4 * ga * slow).epsilon(1e-12));
      CHECK(e.breakdown.pipeline_bubble == Approx(ga * fast).epsilon(1e-12));
      CHECK(e.breakdown.tensor_parallel_comm == 0);
    }
  }
  SECTION("four stages: the bubble is the sum of the three faster slots") {
    // [1, 3, 2, 2] over 8 layers, 8 micro-batches: stage 1 (3 layers) is the slowest
    // unless the head or embedding outweighs a layer.
    const Job j = uneven_job({1, 3, 2, 2}, 4, 1, 8);
    require_valid(j);
    const GpuProfile& gpu = j.cluster.instance.gpu;
    const double b = j.microbatch_size();
    const LayerTime lt = layer_time(gpu, j.model, Precision::fp16, b, 1, false);
    const HeadTime ht = head_time(gpu, j.model, Precision::fp16, b, 1);
    const double F = lt.forward(), B = lt.backward();
    const std::vector<double> slots{1 * (F + B) + ht.embedding_fwd + ht.embedding_bwd, 3 * (F + B), 2 * (F + B),
                                    2 * (F + B) + ht.logits_fwd + ht.logits_bwd};
    double sum = 0, slow = 0;
    for (double x : slots) sum += x, slow = std::max(slow, x);
    const Estimate e = estimate(j);
    CHECK(e.breakdown.compute == Approx(8 * slow).epsilon(1e-12));
    CHECK(e.breakdown.pipeline_bubble == Approx(sum - slow).epsilon(1e-12));
  }
}

TEST_CASE("uneven stages: the estimator charges recompute and tensor all-reduces per stage", "[uneven][estimator]") {
  // tp 2, full checkpointing, [2, 6]: the last stage's slot is 6 layers' kernels +
  // recompute, 6 x 6 + 1 all-reduces of the activation (4 per layer, 2 more recomputed,
  // the head's f) and the loss's three; stage 0's is 2 x 6 + 1 (the embedding's g).
  Job j = uneven_job({2, 6}, 2, 2, 4);
  j.parallel.activation_checkpointing = Checkpointing::full;
  require_valid(j);
  const double b = j.microbatch_size();
  const GpuProfile& gpu = j.cluster.instance.gpu;
  const LayerTime lt = layer_time(gpu, j.model, Precision::fp16, b, 2, false);
  const HeadTime ht = head_time(gpu, j.model, Precision::fp16, b, 2);
  const Estimate e = estimate(j);
  const double slot1_kernels = 6 * (2 * lt.forward() + lt.backward()) + ht.logits_fwd + ht.logits_bwd;
  CHECK(e.breakdown.compute == Approx(4 * slot1_kernels).epsilon(1e-12));
  CHECK(e.breakdown.recompute == Approx(4 * 6 * lt.forward()).epsilon(1e-12));
  const GroupSpan pair{2, 1, 2};  // the tensor group: two GPUs of one node
  auto all_reduce = [&](double bytes) {
    return collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, bytes, pair, j.cluster.instance)
        .total();
  };
  const double ar = all_reduce(b * 1024 * 768 * 2), loss = all_reduce(b * 1024 * 4);
  CHECK(e.breakdown.tensor_parallel_comm == Approx(4 * (37 * ar + 3 * loss)).epsilon(1e-9));
  // Stage 0's slot fills the bubble.
  const double slot0 = 2 * (2 * lt.forward() + lt.backward()) + ht.embedding_fwd + ht.embedding_bwd + 13 * ar;
  CHECK(e.breakdown.pipeline_bubble == Approx(slot0).epsilon(1e-9));
}

TEST_CASE("uneven stages: programs run each stage's own layers", "[uneven][program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (const std::vector<int>& split : {std::vector<int>{2, 6}, std::vector<int>{7, 1}}) {
      const Job j = uneven_job(split);
      require_valid(j);
      INFO("split " << split[0] << "," << split[1] << (gran == Granularity::layer ? " layer" : " chunk"));
      const GpuProfile& gpu = j.cluster.instance.gpu;
      const LayerTime lt = layer_time(gpu, j.model, Precision::fp16, 1, 1, false);
      const HeadTime ht = head_time(gpu, j.model, Precision::fp16, 1, 1);
      for (const RankProgram& prog : build_programs(j, {gran})) {
        const int st = prog.coords.pipeline, L = split[st];
        INFO("rank " << prog.rank << " stage " << st);
        double fwd = 0, bwd = 0, bucket_bytes = 0;
        std::map<int, int> layers_seen;  // layer -> compute instructions
        for (const Instruction& in : prog.ops) {
          if (in.kind == OpKind::forward) fwd += in.seconds;
          if (in.kind == OpKind::backward) bwd += in.seconds;
          if (in.kind == OpKind::forward || in.kind == OpKind::backward) {
            if (in.layer < 0) {
              CHECK(in.layers == L);
            } else {
              CHECK(in.layers == 1);
              CHECK(in.layer < L);
              ++layers_seen[in.layer];
            }
          }
          if (in.group == CommGroup::data && in.kind == OpKind::all_reduce) bucket_bytes += in.bytes;
        }
        const double head_f = st == 0 ? ht.embedding_fwd : ht.logits_fwd;
        const double head_b = st == 0 ? ht.embedding_bwd : ht.logits_bwd;
        CHECK(fwd == Approx(4 * (L * lt.forward() + head_f)).epsilon(1e-12));
        CHECK(bwd == Approx(4 * (L * lt.backward() + head_b)).epsilon(1e-12));
        // One gradient bucket per layer of the stage (dp 4), carrying its parameters.
        const double params = st == 0 ? L * kLayerParams + kEmbeddingParams : L * kLayerParams + kHeadParams + kTiedCopy;
        CHECK(bucket_bytes == Approx(2 * params).epsilon(1e-12));
        CHECK(static_cast<int>(layers_seen.size()) == L);
      }
    }
  }
}

TEST_CASE("uneven stages under sharded data parallelism gather each of the stage's layers", "[uneven][program]") {
  // dp 4 in sharded groups of 2: every forward and backward gathers each of its layers
  // (the embedding and head travel with the layers beside them).
  Job j = uneven_job({3, 5});
  j.parallel.sharded_data_parallel_degree = 2;
  j.parallel.sharding_flavor = ShardingFlavor::fsdp;  // gathers every parameter, one call a layer
  require_valid(j);
  for (const RankProgram& prog : build_programs(j)) {
    const int L = j.layers_on_stage(prog.coords.pipeline);
    int gathers = 0, scatters = 0;
    double gathered = 0;
    for (const Instruction& in : prog.ops) {
      if (in.group != CommGroup::sharded) continue;
      if (in.kind == OpKind::all_gather) ++gathers, gathered += in.bytes * in.count;
      if (in.kind == OpKind::reduce_scatter) ++scatters;
    }
    INFO("rank " << prog.rank);
    CHECK(gathers == 2 * 4 * L);
    CHECK(scatters == 4 * L);
    CHECK(gathered == Approx(2 * 4 * 2 * stage_parameter_count(j, prog.coords.pipeline)).epsilon(1e-12));
  }
}

TEST_CASE("uneven stages: sends and receives pair up", "[uneven][program]") {
  // Four stages [1, 3, 2, 2], GPipe and 1F1B: the n-th send from A to B of a kind matches
  // the n-th receive on B from A, micro-batch by micro-batch.
  for (const PipelineSchedule sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    Job j = uneven_job({1, 3, 2, 2}, 4, 1, 8);
    j.parallel.pipeline = sched;
    require_valid(j);
    std::map<std::tuple<int, int, bool>, std::vector<int>> sent, received;  // (from, to, activation)
    for (const RankProgram& prog : build_programs(j)) {
      for (const Instruction& in : prog.ops) {
        if (in.kind == OpKind::send_activation) sent[{prog.rank, in.peer, true}].push_back(in.microbatch);
        if (in.kind == OpKind::send_gradient) sent[{prog.rank, in.peer, false}].push_back(in.microbatch);
        if (in.kind == OpKind::recv_activation) received[{in.peer, prog.rank, true}].push_back(in.microbatch);
        if (in.kind == OpKind::recv_gradient) received[{in.peer, prog.rank, false}].push_back(in.microbatch);
      }
    }
    CHECK(sent == received);
    CHECK(sent.size() == 2 * 3 * 2u);  // 3 stage boundaries x 2 replicas x 2 directions
  }
}
