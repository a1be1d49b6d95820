// Every rank simulated at scale gives what the folded simulation gives when the ranks are
// identical: GPT-3 175B on 128 p4d nodes (1,024 GPUs: 8 stages, tensor groups of 8 inside
// nodes, 16 replicas), simulated once with one rank per stage standing for the others and
// once with all 1,024, agree to 1e-9 of the step on the step, its parts and every rank's
// finish. The unfolded run takes the simulator's at-scale paths (mailbox flows, routing
// zones of 64 GPUs, gateways between them) that the folded one mostly does not.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

TEST_CASE("unfolded and folded simulations agree to 1e-9 at 1,024 GPUs", "[sim][symmetry][scale]") {
  const Job job = parse_job(
      "model: gpt3-175b\ncluster: {instance_type: p4d.24xlarge, nodes: 128}\n"
      "training: {global_batch: 256, precision: fp16}\n"
      "parallel: {pipeline_parallel_degree: 8, tensor_parallel_degree: 8, microbatches: 16, "
      "activation_checkpointing: full}\n",
      "unfolded-1024");
  REQUIRE(job.world_size() == 1024);
  sim::SimOptions unfolded;
  unfolded.use_symmetry = false;
  const sim::SimResult folded = sim::simulate(job), every = sim::simulate(job, unfolded);
  REQUIRE(folded.symmetric);
  REQUIRE_FALSE(every.symmetric);
  CHECK(folded.ranks.size() == 8);  // one replica, one rank per tensor group
  CHECK(every.ranks.size() == 1024);

  const double step = folded.metrics.step_time, tol = 1e-9 * step;
  CHECK(std::fabs(every.metrics.step_time - step) <= tol);
  const StepBreakdown &a = folded.metrics.breakdown, &b = every.metrics.breakdown;
  CHECK(std::fabs(a.compute - b.compute) <= tol);
  CHECK(std::fabs(a.tensor_parallel_comm - b.tensor_parallel_comm) <= tol);
  CHECK(std::fabs(a.data_parallel_exposed - b.data_parallel_exposed) <= tol);
  CHECK(std::fabs(a.pipeline_bubble - b.pipeline_bubble) <= tol);
  CHECK(std::fabs(folded.bubble_fraction - every.bubble_fraction) <= 1e-9);

  // Every rank finishes when the rank that stood for its stage did.
  std::map<int, double> stage_end;
  for (const sim::RankResult& r : folded.ranks) stage_end[r.stage] = r.end_time;
  REQUIRE(stage_end.size() == 8);
  int checked = 0;
  for (const sim::RankResult& r : every.ranks) {
    INFO("rank " << r.rank << " stage " << r.stage);
    CHECK(std::fabs(r.end_time - stage_end.at(r.stage)) <= tol);
    ++checked;
  }
  CHECK(checked == 1024);
}
