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
