// The simulator runs a mixture of experts' programs (all-to-alls over the expert groups,
// the experts' gradients over the expert-data groups) and agrees with the estimator,
// with and without standing one rank for its mirrors.
#include <catch2/catch.hpp>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

namespace {
Job mixtral_job() { return load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/mixtral-8x7b-p4d-8.yaml"); }
}  // namespace

TEST_CASE("a mixture of experts simulates to the estimate", "[sim][moe]") {
  Job job = mixtral_job();
  const Estimate e = estimate(job);
  sim::SimOptions every_rank;
  every_rank.use_symmetry = false;
  const sim::SimResult r = sim::simulate(job, every_rank);
  CHECK(r.metrics.step_time == Approx(e.step_time).epsilon(0.05));
  CHECK(r.metrics.memory.total() == Approx(e.memory.total()).epsilon(0.05));
  // Expert groups inside the node (tensor 2 x expert 4 on 8 GPUs): the all-to-alls stay
  // on NVSwitch and the step is shorter than with expert groups across 8 nodes.
  job.parallel.expert_parallel_degree = 4;
  job.parallel.placement_strategy = PlacementOrder::parse("PDT");
  const double inside = sim::simulate(job).metrics.step_time;
  CHECK(inside < r.metrics.step_time);
  CHECK(inside == Approx(estimate(job).step_time).epsilon(0.05));
}

TEST_CASE("MoE parallel folding simulates to the estimate, with and without mirrors", "[sim][moe][folding]") {
  // Qwen3-30B-A3B on 4 p5 nodes: attention tensor 2 with sequence parallelism, experts
  // whole (expert tensor 1) in expert groups of 16 drawn from the tensor x data ranks (two
  // nodes each), then the experts split over expert tensor 2 in groups of 8, then the
  // first layout with Megatron's allgather dispatcher, and with the exchanges overlapped
  // (a shorter step: they run beside the kernels, each layer's step at least its kernels).
  const auto job = [](int etp, int ep, const char* dispatcher = "alltoall", bool overlap = false) {
    return parse_job("kind: job\nname: t\nmodel: {base: qwen3-30b-a3b, seq_len: 4096}\n"
                     "cluster: {instance_type: p5.48xlarge, nodes: 4}\n"
                     "training: {global_batch: 32, precision: bf16}\n"
                     "parallel: {tensor_parallel_degree: 2, sequence_parallel: true, flash_attention: true,\n"
                     "           shard_optimizer_state: true, microbatches: 2, placement_strategy: PDT,\n"
                     "           expert_parallel_degree: " + std::to_string(ep) +
                         ", expert_tensor_parallel_degree: " + std::to_string(etp) +
                         ", moe_token_dispatcher: " + dispatcher +
                         ", moe_a2a_overlap: " + (overlap ? "true" : "false") + "}\n",
                     "folding.yaml");
  };
  for (const Job& j : {job(1, 16), job(2, 8), job(1, 16, "allgather")}) {
    INFO("expert tensor " << j.expert_tensor_degree() << ", expert " << j.parallel.expert_parallel_degree);
    const Estimate e = estimate(j);
    sim::SimOptions every_rank;
    every_rank.use_symmetry = false;
    const sim::SimResult all = sim::simulate(j, every_rank);
    CHECK(all.metrics.step_time == Approx(e.step_time).epsilon(0.05));
    CHECK(all.metrics.memory.total() == Approx(e.memory.total()).epsilon(0.05));
    CHECK(sim::simulate(j).metrics.step_time == Approx(all.metrics.step_time).epsilon(0.01));
  }
  const Estimate serial = estimate(job(1, 16)), beside = estimate(job(1, 16, "alltoall", true));
  CHECK(beside.step_time < serial.step_time);
  CHECK(beside.breakdown.expert_parallel_comm < serial.breakdown.expert_parallel_comm);
  CHECK(beside.breakdown.compute >= serial.breakdown.compute);
  // A known gap (issue 52, open): with the exchanges overlapped the simulator exposes more
  // of them than the estimator's per-pass rule (188.8 against 153.7 ms here, the step 10.7%
  // longer). The likely cause: the programs start a compute instruction's overlapped
  // exchanges together (dispatch and combine at once), so they share the links for twice as
  // long and slow the kernels for both. Bounded, not hidden: within 12%, the simulator's
  // the longer.
  const double simulated = sim::simulate(job(1, 16, "alltoall", true)).metrics.step_time;
  CHECK(simulated == Approx(beside.step_time).epsilon(0.12));
  CHECK(simulated >= beside.step_time);
  CHECK(simulated < sim::simulate(job(1, 16)).metrics.step_time);
}
