// Symmetry with blocks of replicas: when replicas share nodes, the smallest leading block
// of replicas that owns its nodes stands for all, provided each data-parallel group's
// members inside the block sit on one node. The expectation is the full simulation.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

namespace {
Job job_with(const std::string& parallel, int nodes = 8) {
  return parse_job("model: gpt3-2.7b\ncluster: {instance_type: p4d.24xlarge, nodes: " + std::to_string(nodes) + "}\n"
                   "training: {global_batch: 64, precision: fp16}\nparallel: {" + parallel + "}\n",
                   "block-symmetry");
}
}  // namespace

TEST_CASE("a block of replicas stands for all exactly", "[sim][symmetry]") {
  struct Case {
    const char* parallel;
    int block;  // replicas simulated
  };
  const Case cases[] = {
      // 64 GPUs. T fastest, then D: a node holds 4 replicas' tensor pairs of one stage
      // (dp 8, so two blocks of 4).
      {"pipeline_parallel_degree: 4, tensor_parallel_degree: 2, placement_strategy: PDT, microbatches: 8", 4},
      // P fastest over 2 stages, then D: a node holds 4 replicas' two stages (dp 32).
      {"pipeline_parallel_degree: 2, placement_strategy: TDP, microbatches: 2", 4},
      // D fastest: a node holds 8 replicas (dp 16); sharded groups of 4 stay inside the
      // block and the replica all-reduce crosses blocks.
      {"pipeline_parallel_degree: 2, tensor_parallel_degree: 2, placement_strategy: PTD, "
       "sharded_data_parallel_degree: 4, activation_checkpointing: full, microbatches: 4", 8},
      // T fastest, then D: a node holds 4 replicas (dp 32), but a sharded group of 8 spans
      // two nodes: the block grows to the sharded group (its collectives cross the network
      // inside the block), and the replica all-reduce (one member a block) crosses blocks.
      {"tensor_parallel_degree: 2, placement_strategy: PTD, sharded_data_parallel_degree: 8, "
       "sharded_collective: all_to_all, activation_checkpointing: full, microbatches: 2", 8},
      // The same with context groups of 2 inside the sharded groups (dp x cp 32).
      {"tensor_parallel_degree: 2, context_parallel_degree: 2, placement_strategy: PTD, "
       "sharded_data_parallel_degree: 8, activation_checkpointing: full, microbatches: 1", 8},
  };
  for (const Case& c : cases) {
    INFO(c.parallel);
    const Job job = job_with(c.parallel);
    REQUIRE(sim::replica_cluster_size(job) == c.block);
    sim::SimOptions full;
    full.use_symmetry = false;
    const sim::SimResult a = sim::simulate(job), b = sim::simulate(job, full);
    CHECK(a.symmetric);
    CHECK_FALSE(b.symmetric);
    const int per_replica = job.world_size() / job.data_context_degree() /
                            (sim::tensor_groups_are_symmetric(job) ? job.parallel.tensor_parallel_degree : 1);
    CHECK(static_cast<int>(a.ranks.size()) == per_replica * c.block);
    CHECK(a.metrics.step_time == Approx(b.metrics.step_time).epsilon(1e-6));
    CHECK(a.exposed.data == Approx(b.exposed.data).epsilon(1e-6).margin(1e-12));
  }
}

TEST_CASE("one rank per tensor-parallel group stands for the group exactly", "[sim][symmetry]") {
  // Tensor groups inside nodes, with pipeline transfers and data-parallel traffic over
  // the NICs the members share, and offload over shared PCIe switches.
  const char* cases[] = {
      "pipeline_parallel_degree: 2, tensor_parallel_degree: 8, microbatches: 4",
      "pipeline_parallel_degree: 4, tensor_parallel_degree: 4, activation_checkpointing: full, "
      "offload_activations: true, microbatches: 8",
      "tensor_parallel_degree: 2, sharded_data_parallel_degree: 8, activation_checkpointing: full, microbatches: 2",
  };
  for (const char* parallel : cases) {
    INFO(parallel);
    const Job job = job_with(parallel, 4);
    REQUIRE(sim::tensor_groups_are_symmetric(job));
    sim::SimOptions full;
    full.use_symmetry = false;
    const sim::SimResult a = sim::simulate(job), b = sim::simulate(job, full);
    CHECK(a.ranks.size() < b.ranks.size());
    CHECK(a.metrics.step_time == Approx(b.metrics.step_time).epsilon(1e-6));
  }
}

TEST_CASE("no symmetry when every replica shares nodes with the others", "[sim][symmetry]") {
  // One node, data parallel 8: replica 0's node holds them all.
  const Job job = job_with("microbatches: 8", 1);
  std::string why;
  CHECK(sim::replica_cluster_size(job, &why) == 0);
  CHECK_FALSE(why.empty());
  CHECK_FALSE(sim::simulate(job).symmetric);
}

TEST_CASE("an oversubscribed network is simulated as with every rank", "[sim][symmetry]") {
  // Each node's uplink (the NICs' rate / 3) carries all four NICs' pipeline and
  // data-parallel traffic: one rank per tensor group would load it with a quarter of it.
  Job job = parse_job("model: gpt3-2.7b\ncluster: {instance_type: p4d.24xlarge, nodes: 24, oversubscription: 3}\n"
                      "training: {global_batch: 192, precision: fp16}\n"
                      "parallel: {pipeline_parallel_degree: 4, tensor_parallel_degree: 8, microbatches: 8}\n",
                      "oversubscribed");
  CHECK_FALSE(sim::tensor_groups_are_symmetric(job));
  sim::SimOptions full;
  full.use_symmetry = false;
  const sim::SimResult a = sim::simulate(job), b = sim::simulate(job, full);
  CHECK(a.metrics.step_time == Approx(b.metrics.step_time).epsilon(1e-9));
  job.cluster.oversubscription = 1;  // and the uplinks were what made it slower
  CHECK(sim::simulate(job).metrics.step_time < 0.9 * a.metrics.step_time);
}
