// The simulator runs context parallelism's programs (the context group's exchanges around
// each attention core) and agrees with the estimator, with every rank and with one rank
// standing for its mirrors; the p2p ring beside the core costs less than the same bytes
// gathered before it.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

namespace {

// LLaMA-3 8B at 32k tokens on `nodes` p5 nodes: tensor 8 inside a node, context 2.
Job long_job(int nodes, const std::string& comm) {
  return parse_job("kind: job\nname: t\nmodel: {base: llama-3-8b, seq_len: 32768}\n"
                   "cluster: {instance_type: p5.48xlarge, nodes: " +
                       std::to_string(nodes) +
                       "}\ntraining: {global_batch: 8, precision: bf16}\n"
                       "parallel: {tensor_parallel_degree: 8, sequence_parallel: true, flash_attention: true, "
                       "context_parallel_degree: 2, cp_comm_type: " +
                       comm + ", microbatches: " + std::to_string(8 / (nodes / 2)) + "}\n",
                   "cp.yaml");
}

}  // namespace

TEST_CASE("context parallelism simulates to the estimate", "[sim][context]") {
  const Job job = long_job(2, "p2p");
  const Estimate e = estimate(job);
  sim::SimOptions every_rank;
  every_rank.use_symmetry = false;
  const sim::SimResult r = sim::simulate(job, every_rank);
  CHECK(r.metrics.step_time == Approx(e.step_time).epsilon(0.05));
  CHECK(r.metrics.memory.total() == Approx(e.memory.total()).epsilon(0.05));
  // Four nodes: two replicas of a context group across two nodes; one block stands for
  // the other.
  const Job four = long_job(4, "p2p");
  const sim::SimResult mirrored = sim::simulate(four), all = sim::simulate(four, every_rank);
  CHECK(mirrored.metrics.step_time == Approx(all.metrics.step_time).epsilon(0.01));
}

TEST_CASE("the p2p ring beside the core is cheaper than the same bytes gathered before it", "[sim][context]") {
  const double ring = sim::simulate(long_job(2, "p2p")).metrics.step_time;
  const double gathered = sim::simulate(long_job(2, "allgather")).metrics.step_time;
  CHECK(ring < gathered);
  CHECK(estimate(long_job(2, "p2p")).step_time < estimate(long_job(2, "allgather")).step_time);
}

TEST_CASE("a2a+p2p simulates to the estimate", "[sim][context]") {
  // LLaMA-3 8B at 32k on 2 p5 nodes, tensor 4, context 4 = a2a 2 x p2p 2.
  const Job job = parse_job("kind: job\nname: t\nmodel: {base: llama-3-8b, seq_len: 32768}\n"
                            "cluster: {instance_type: p5.48xlarge, nodes: 2}\n"
                            "training: {global_batch: 4, precision: bf16}\n"
                            "parallel: {tensor_parallel_degree: 4, flash_attention: true, microbatches: 4, "
                            "context_parallel_degree: 4, cp_comm_type: a2a+p2p, context_a2a_degree: 2}\n",
                            "h.yaml");
  sim::SimOptions every_rank;
  every_rank.use_symmetry = false;
  CHECK(sim::simulate(job, every_rank).metrics.step_time == Approx(estimate(job).step_time).epsilon(0.05));
}
