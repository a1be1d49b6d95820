// Partial activation checkpointing (parallel.checkpointed_layers = K): only the first K
// layers of each stage are checkpointed and recomputed, the others keep their full
// activations. Memory, estimator, FLOP counts and programs against hand numbers.
//
// GPT-2 small (12 layers, h 768, s 1024, a 12), b 1, t 1, per layer and micro-batch:
//   no checkpointing: s b h (34 + 5 a s / h) = 114 s b h = 89,653,248 bytes
//   selective:        s b h 34                          = 26,738,688 bytes
//   full:             the layer input, 2 s b h           =  1,572,864 bytes
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

constexpr double kFull = 89653248.0, kSelective = 26738688.0, kInput = 1572864.0;

// pp 2 x tp `tp` on one node, 4 micro-batches of 1 sequence; 6 layers per stage.
Job ckpt_job(Checkpointing policy, int K, int tp = 1) {
  Job j = p4d_job("gpt2-small", 1, 8 / (2 * tp) * 4);
  j.parallel.pipeline_parallel_degree = 2;
  j.parallel.tensor_parallel_degree = tp;
  j.parallel.microbatches = 4;
  j.parallel.activation_checkpointing = policy;
  j.parallel.checkpointed_layers = K;
  return j;
}

std::string error_key(const std::string& parallel) {
  try {
    parse_job("model: gpt2-small\ncluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
              "training: {global_batch: 16}\nparallel:\n  pipeline_parallel_degree: 2\n  microbatches: 4\n" +
                  parallel,
              "ckpt.yaml");
  } catch (const ScenarioError& e) {
    return e.key();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("checkpointed_layers loads and is checked", "[checkpointing][scenario]") {
  CHECK(error_key("  activation_checkpointing: full\n  checkpointed_layers: 3\n") == "(no error)");
  CHECK(error_key("  activation_checkpointing: full\n  checkpointed_layers: -2\n") == "parallel.checkpointed_layers");
  CHECK(error_key("  checkpointed_layers: 3\n") == "parallel.checkpointed_layers");  // needs checkpointing
  CHECK(error_key("  activation_checkpointing: selective\n  checkpointed_layers: 0\n") == "(no error)");
  const Job j = parse_job("model: gpt2-small\ncluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
                          "training: {global_batch: 16}\nparallel: {pipeline_parallel_degree: 2, microbatches: 4, "
                          "activation_checkpointing: full}\n",
                          "ckpt.yaml", {"checkpointed_layers=2"});
  CHECK(j.parallel.checkpointed_layers == 2);
  CHECK(j.checkpointed_layers_on_stage(0) == 2);
  CHECK(j.checkpointed_fraction() == Approx(4.0 / 12));
}

TEST_CASE("checkpointed layers per stage and per chunk", "[checkpointing]") {
  Job j = ckpt_job(Checkpointing::full, -1);
  CHECK(j.checkpointed_layers_on_stage(0) == 6);
  CHECK(j.checkpointed_fraction() == 1.0);
  j.parallel.checkpointed_layers = 100;  // clamped to the stage
  CHECK(j.checkpointed_layers_on_stage(1) == 6);
  CHECK(j.checkpointed_fraction() == 1.0);
  j.parallel.stage_layers = {2, 10};
  j.parallel.checkpointed_layers = 4;
  CHECK(j.checkpointed_layers_on_stage(0) == 2);
  CHECK(j.checkpointed_layers_on_stage(1) == 4);
  CHECK(j.checkpointed_fraction() == Approx(6.0 / 12));
  j.parallel.activation_checkpointing = Checkpointing::none;
  j.parallel.checkpointed_layers = -1;
  CHECK(j.checkpointed_layers_on_stage(1) == 0);
  CHECK(j.checkpointed_fraction() == 0.0);
  // Interleaved: a stage's layers in chunk order, so K = 4 of 2 chunks x 3 layers is all
  // of chunk 0 and the first layer of chunk 1.
  Job v = ckpt_job(Checkpointing::full, 4);
  v.parallel.virtual_stages = 2;
  require_valid(v);
  CHECK(v.checkpointed_layers_in_chunk(0, 0) == 3);
  CHECK(v.checkpointed_layers_in_chunk(0, 1) == 1);
  v.parallel.checkpointed_layers = 2;
  CHECK(v.checkpointed_layers_in_chunk(1, 0) == 2);
  CHECK(v.checkpointed_layers_in_chunk(1, 1) == 0);
}

TEST_CASE("partial checkpointing: stored bytes scale with K", "[checkpointing][memory]") {
  // Stage 0 holds 2 micro-batches (1F1B, p 2) of 6 layers: K checkpointed, 6 - K full.
  for (const Checkpointing policy : {Checkpointing::full, Checkpointing::selective}) {
    const double kept = policy == Checkpointing::full ? kInput : kSelective;
    for (int K : {0, 1, 2, 5, 6}) {
      const Job j = ckpt_job(policy, K);
      require_valid(j);
      INFO(to_string(policy) << " K " << K);
      const MemoryBreakdown mb = stage_memory(j, 0);
      CHECK(mb.activations == Approx(2 * (K * kept + (6 - K) * kFull)).epsilon(1e-12));
      CHECK(stored_stage_bytes(j, 1, 0) == Approx(K * kept + (6 - K) * kFull).epsilon(1e-12));
      // Recomputing a checkpointed layer needs the layer's full activations meanwhile.
      CHECK(mb.activation_working == (K > 0 ? Approx(kFull - (policy == Checkpointing::full ? 0 : kept)) : Approx(0)));
    }
    // -1 is every layer, as without the key.
    CHECK(stage_memory(ckpt_job(policy, -1), 0).activations == Approx(2 * 6 * kept).epsilon(1e-12));
  }
  SECTION("offload moves only the checkpointed layers") {
    // Horizon 4: min(K x 2, 5) checkpointed layers stay, the rest of them go to the host;
    // the layers that are not checkpointed stay on the device.
    Job j = ckpt_job(Checkpointing::full, 3);
    j.parallel.offload_activations = true;
    const MemoryBreakdown mb = stage_memory(j, 0);
    CHECK(mb.activations == Approx(5 * kInput + 2 * 3 * kFull).epsilon(1e-12));
    CHECK(mb.host_offload == Approx(1 * kInput).epsilon(1e-12));
  }
}

TEST_CASE("partial checkpointing: recompute time and hardware FLOPs scale with K / L", "[checkpointing][estimator]") {
  const GpuProfile& gpu = ckpt_job(Checkpointing::full, -1).cluster.instance.gpu;
  const Job all = ckpt_job(Checkpointing::full, -1);
  const LayerTime lt = layer_time(gpu, all.model, Precision::fp16, 1, 1, false);
  const Estimate e_all = estimate(all);
  CHECK(e_all.breakdown.recompute == Approx(4 * 6 * lt.forward()).epsilon(1e-12));
  for (int K : {0, 2, 3}) {
    const Job j = ckpt_job(Checkpointing::full, K);
    const Estimate e = estimate(j);
    INFO("K " << K);
    CHECK(e.breakdown.recompute == Approx(4 * K * lt.forward()).epsilon(1e-12));
    CHECK(e.breakdown.compute == Approx(e_all.breakdown.compute - 4 * (6 - K) * lt.forward()).epsilon(1e-12));
    // The published-table convention: hardware FLOPs count recompute, here of K of 6.
    CHECK(e.hardware_flops - e.model_flops == Approx((e_all.hardware_flops - e_all.model_flops) * K / 6.0));
    CHECK(e.hardware_flops ==
          Approx(hardware_flops_per_step(j.model, 16, Checkpointing::full, K / 6.0)).epsilon(1e-12));
  }
  // Selective: the attention core of K layers.
  const Job sel = ckpt_job(Checkpointing::selective, 2);
  CHECK(estimate(sel).breakdown.recompute == Approx(4 * 2 * lt.attention_fwd).epsilon(1e-12));
  // Offload traffic: only the checkpointed layers travel (2 of 6 here).
  Job off = ckpt_job(Checkpointing::full, 2), off_all = ckpt_job(Checkpointing::full, -1);
  off.parallel.offload_activations = off_all.parallel.offload_activations = true;
  CHECK(estimate(off).breakdown.offload_traffic == Approx(estimate(off_all).breakdown.offload_traffic * 2 / 6));
  // Tensor parallel, full checkpointing: 2 more all-reduces per checkpointed layer, so
  // recomputing 2 of 6 layers adds 4/12 of what recomputing all 6 adds.
  const Estimate t_all = estimate(ckpt_job(Checkpointing::full, -1, 2));
  const Estimate t_two = estimate(ckpt_job(Checkpointing::full, 2, 2));
  const Estimate t_none = estimate(ckpt_job(Checkpointing::full, 0, 2));
  CHECK((t_two.breakdown.tensor_parallel_comm - t_none.breakdown.tensor_parallel_comm) /
            (t_all.breakdown.tensor_parallel_comm - t_none.breakdown.tensor_parallel_comm) ==
        Approx(4.0 / 12));
}

TEST_CASE("partial checkpointing: programs recompute only the checkpointed layers", "[checkpointing][program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (const Checkpointing policy : {Checkpointing::full, Checkpointing::selective}) {
      for (int K : {0, 2, 6}) {
        const Job j = ckpt_job(policy, K, 2);  // tp 2, dp 2, b 1
        require_valid(j);
        INFO(to_string(policy) << " K " << K << (gran == Granularity::layer ? " layer" : " chunk"));
        const LayerTime lt = layer_time(j.cluster.instance.gpu, j.model, Precision::fp16, 1, 2, false);
        const double per_layer = policy == Checkpointing::full ? lt.forward() : lt.attention_fwd;
        for (const RankProgram& prog : build_programs(j, {gran})) {
          double recompute = 0;
          int tensor = 0;
          std::set<int> layers;
          for (const Instruction& in : prog.ops) {
            if (in.kind == OpKind::recompute) {
              recompute += in.seconds;
              if (in.layer >= 0) {
                CHECK(in.layer < K);  // the chunk's first K layers
                layers.insert(in.layer);
              } else {
                CHECK(in.layers == K);
                CHECK(in.seconds == Approx(K * per_layer).epsilon(1e-12));
              }
            }
            if (in.group == CommGroup::tensor) tensor += in.count;
          }
          INFO("rank " << prog.rank);
          CHECK(recompute == Approx(4 * K * per_layer).epsilon(1e-12));
          if (gran == Granularity::layer) CHECK(static_cast<int>(layers.size()) == K);
          // Megatron's rule: the embedding's g on stage 0; the head's f and the loss's
          // three all-reduces on the last stage.
          const int ends = prog.coords.pipeline == 0 ? 1 : 1 + 3;
          CHECK(tensor == 4 * (4 * 6 + (policy == Checkpointing::full ? 2 * K : 0) + ends));
        }
      }
    }
  }
}

TEST_CASE("partial checkpointing: offload and reload move the checkpointed layers only", "[checkpointing][program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (int K : {0, 2}) {
      Job j = ckpt_job(Checkpointing::full, K);
      j.parallel.offload_activations = true;
      require_valid(j);
      INFO("K " << K << (gran == Granularity::layer ? " layer" : " chunk"));
      for (const RankProgram& prog : build_programs(j, {gran})) {
        double offloaded = 0, reloaded = 0;
        for (const Instruction& in : prog.ops) {
          if (in.kind == OpKind::offload) {
            offloaded += in.bytes;
            if (in.layer >= 0) CHECK(in.layer < K);
          }
          if (in.kind == OpKind::reload) reloaded += in.bytes;
        }
        CHECK(offloaded == Approx(4 * K * kInput).epsilon(1e-12));
        CHECK(reloaded == Approx(4 * K * kInput).epsilon(1e-12));
      }
    }
  }
}
