// DeepEP's dispatcher (moe_token_dispatcher deepep) simulated: the simulator sends the
// node-aware exchange's phases (expert_exchange.hpp) as traffic, the estimator prices them
// on idle links; the two agree, and the expert exchange costs less than the plain one by
// about the network bytes it spares.
#include <catch2/catch.hpp>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

TEST_CASE("DeepEP's node-aware exchange simulates to the estimate", "[sim][moe][deepep]") {
  // Qwen3-30B-A3B (128 experts, top-8) on 4 p5 nodes, expert groups of 16 over two nodes:
  // a token reaches the other node with probability 1 - C(64,8)/C(128,8) = 0.9965, so it
  // crosses once where the plain exchange sends its copies for the other node's GPUs, half
  // of them: 0.9965 / 8 against 1/2 of a member's bytes on the network.
  const auto job = [](const char* dispatcher) {
    return parse_job(std::string("kind: job\nname: t\nmodel: {base: qwen3-30b-a3b, seq_len: 4096}\n"
                                 "cluster: {instance_type: p5.48xlarge, nodes: 4}\n"
                                 "training: {global_batch: 32, precision: bf16}\n"
                                 "parallel: {tensor_parallel_degree: 2, sequence_parallel: true, flash_attention: true,\n"
                                 "           shard_optimizer_state: true, microbatches: 2, placement_strategy: PDT,\n"
                                 "           expert_parallel_degree: 16, expert_tensor_parallel_degree: 1,\n"
                                 "           moe_token_dispatcher: ") +
                         dispatcher + "}\n",
                     "deepep.yaml");
  };
  const Job deepep = job("deepep"), plain = job("alltoall");
  const Estimate e = estimate(deepep), p = estimate(plain);
  CHECK(e.breakdown.expert_parallel_comm < 0.5 * p.breakdown.expert_parallel_comm);
  CHECK(e.breakdown.compute == Approx(p.breakdown.compute));
  sim::SimOptions every_rank;
  every_rank.use_symmetry = false;
  const sim::SimResult all = sim::simulate(deepep, every_rank);
  CHECK(all.metrics.step_time == Approx(e.step_time).epsilon(0.05));
  CHECK(sim::simulate(deepep).metrics.step_time == Approx(all.metrics.step_time).epsilon(0.01));
  CHECK(all.metrics.step_time < sim::simulate(plain).metrics.step_time);
}
