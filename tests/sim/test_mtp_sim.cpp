// Multi-token prediction in the per-rank programs: a small mixture of experts with one MTP
// depth (a layer with experts, its all-to-alls, the output head again) on the last stage
// simulates to the estimate, with the MTP layer in a chunk with layers and alone with the
// loss (Megatron's "...|mL" layout), with and without standing one rank for its mirrors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

namespace {

Job mtp_job(int mtp_layers, const std::string& layout) {
  return parse_job(
      "kind: job\nname: mtp\n"
      "model: {layers: 8, hidden: 1024, heads: 16, ffn_hidden: 4096, vocab: 32000, seq_len: 2048, norm: rmsnorm,\n"
      "        mlp: swiglu, bias: false, positions: rope, dropout: 0, tied_embeddings: false, experts: 8,\n"
      "        experts_per_token: 2, expert_ffn_hidden: 1024, mtp_layers: " + std::to_string(mtp_layers) + "}\n"
      "cluster: {instance_type: p5.48xlarge, nodes: 2}\n"
      "training: {global_batch: 32, precision: bf16, optimizer: adam}\n"
      "parallel: {pipeline_parallel_degree: 2, tensor_parallel_degree: 2, sequence_parallel: true,\n"
      "           expert_parallel_degree: 4, expert_tensor_parallel_degree: 1, shard_optimizer_state: true,\n"
      "           flash_attention: true, microbatches: 8, placement_strategy: PDT" +
          (layout.empty() ? std::string() : ", pipeline_layout: \"" + layout + "\"") + "}\n",
      "mtp.yaml");
}

}  // namespace

TEST_CASE("an MTP depth on the last stage simulates to the estimate", "[sim][mtp]") {
  for (const char* layout : {"", "Etttt|ttttmL"}) {
    INFO("layout '" << layout << "'");
    const Job job = mtp_job(1, layout);
    const Estimate e = estimate(job);
    sim::SimOptions every_rank;
    every_rank.use_symmetry = false;
    const sim::SimResult all = sim::simulate(job, every_rank);
    CHECK(all.metrics.step_time == Approx(e.step_time).epsilon(0.05));
    CHECK(all.metrics.memory.total() == Approx(e.memory.total()).epsilon(0.05));
    CHECK(sim::simulate(job).metrics.step_time == Approx(all.metrics.step_time).epsilon(0.01));
    // The depth's work lengthens the step.
    CHECK(e.step_time > estimate(mtp_job(0, layout[0] == '\0' ? "" : "Etttt|ttttL")).step_time);
  }
}

TEST_CASE("the MTP layer alone with the loss in an interleaved chunk: priced alike by both", "[sim][mtp]") {
  // Interleaved with an empty last chunk this small job's estimate is already above its
  // simulation without MTP (-8.7%: the estimator's fill and drain from each stage's work
  // alone, docs/architecture.md §9). What the chunk of the MTP layer and the loss adds is
  // the same in both, to 1% of the step.
  const Job with = mtp_job(1, "Etttt|tt|tt|mL"), without = mtp_job(0, "Etttt|tt|tt|L");
  const double est = estimate(with).step_time - estimate(without).step_time;
  const double simulated = sim::simulate(with).metrics.step_time - sim::simulate(without).metrics.step_time;
  CHECK(est > 0);
  CHECK(simulated > 0);
  CHECK(std::abs(est - simulated) < 0.01 * sim::simulate(with).metrics.step_time);
}

TEST_CASE("an MTP layer's experts are reduced over the expert-data group, its embedding copy with the first stage's",
          "[sim][mtp][program]") {
  const Job job = mtp_job(1, "");
  const Job plain = mtp_job(0, "");
  // Rank 0 of the last stage (placement PDT: pipeline outermost, 8 ranks a stage).
  const RankProgram last = build_program(job, 8), last_plain = build_program(plain, 8);
  const auto bytes = [](const RankProgram& p, OpKind kind, CommGroup group) {
    double sum = 0;
    for (const Instruction& in : p.ops)
      if (in.kind == kind && in.group == group) sum += in.bytes * in.count;
    return sum;
  };
  // Expert data: tensor 2 x data 4 / expert 4 = 2 ranks. The MTP layer's rank share of
  // experts (8 / 4 = 2 experts of 3 x 1024 x 1024, bf16 gradients) is reduce-scattered there
  // besides the 4 layers' (ZeRO-1).
  const double expert = 2.0 * 3 * 1024 * 1024 * 2;
  CHECK(bytes(last, OpKind::reduce_scatter, CommGroup::expert_data) -
            bytes(last_plain, OpKind::reduce_scatter, CommGroup::expert_data) ==
        Approx(expert));
  // The untied embedding's copy (V / t x h, bf16) summed with the first stage's once a step.
  CHECK(bytes(last, OpKind::all_reduce, CommGroup::embedding) == Approx(32000.0 / 2 * 1024 * 2 / 4));
  CHECK(bytes(last_plain, OpKind::all_reduce, CommGroup::embedding) == 0);
}
