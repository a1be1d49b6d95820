// Slow GPUs (simulate --slow, issue 32): on hand-built hardware with free links (ideal_
// hardware.hpp) a data-parallel step is its ranks' compute, so one slow node or rank sets
// the step at its own factor (the max of N), and a jitter over 64 GPUs sets it at the
// slowest GPU's; bad specs are refused naming the reason.
#include <catch2/catch.hpp>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "ideal_hardware.hpp"
#include "job_fixtures.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;
using partune::testing::ideal_instance;
using partune::testing::ideal_job;
using partune::testing::make_model;
using partune::testing::require_valid;

namespace {

// Data parallelism only: `nodes` nodes of 8 GPUs, one sequence a GPU.
Job data_parallel(int nodes) {
  Job j = ideal_job(make_model(4, 512, 8, 2048, 8, 128), ideal_instance(8, 1e12), nodes, 8 * nodes);
  require_valid(j);
  return j;
}

double step(const Job& job, const std::vector<sim::Slowdown>& slow) {
  sim::SimOptions o;
  o.slowdowns = slow;
  return sim::simulate(job, o).metrics.step_time;
}

}  // namespace

TEST_CASE("one slow node or GPU sets the data-parallel step at its factor", "[sim][stragglers]") {
  const Job job = data_parallel(4);  // 32 GPUs
  const double base = step(job, {});
  REQUIRE(base > 0);
  CHECK(step(job, {sim::parse_slowdown("node=2:1.15")}) == Approx(1.15 * base).epsilon(1e-6));
  CHECK(step(job, {sim::parse_slowdown("rank=29:1.3")}) == Approx(1.3 * base).epsilon(1e-6));
  // Two slow-downs on one GPU multiply; the slowest GPU decides.
  CHECK(step(job, {sim::parse_slowdown("node=3:1.1"), sim::parse_slowdown("rank=29:1.2")}) ==
        Approx(1.1 * 1.2 * base).epsilon(1e-6));
}

TEST_CASE("a jitter over 64 GPUs: the step is the slowest GPU's, the max of 64 draws", "[sim][stragglers]") {
  const Job job = data_parallel(8);  // 64 GPUs
  const double base = step(job, {});
  const std::vector<sim::Slowdown> jitter{sim::parse_slowdown("jitter=0.05")};
  const std::vector<double> factors = sim::slowdown_factors(job, jitter);
  const double slowest = *std::max_element(factors.begin(), factors.end());
  CHECK(step(job, jitter) == Approx(slowest * base).epsilon(1e-6));
  // The largest |z| of 64 normal draws lies between 1.5 and 3.5 (expected about 2.6):
  // the step is 7.5% to 17.5% longer at a 5% standard deviation.
  CHECK(slowest > 1 + 1.5 * 0.05);
  CHECK(slowest < 1 + 3.5 * 0.05);
  // The same job and jitter draw the same factors.
  CHECK(sim::slowdown_factors(job, jitter) == factors);
}

TEST_CASE("slow-GPU specs outside the job or the syntax are refused", "[sim][stragglers]") {
  CHECK_THROWS_AS(sim::parse_slowdown("node=2"), std::invalid_argument);
  CHECK_THROWS_AS(sim::parse_slowdown("gpu=1:1.2"), std::invalid_argument);
  CHECK_THROWS_AS(sim::parse_slowdown("node=1:0.5"), std::invalid_argument);  // faster is not a straggler
  CHECK_THROWS_AS(sim::parse_slowdown("node=1.5:2"), std::invalid_argument);
  CHECK_THROWS_AS(sim::parse_slowdown("jitter=x"), std::invalid_argument);
  const Job job = data_parallel(4);
  try {
    sim::slowdown_factors(job, {sim::parse_slowdown("node=4:1.2")});
    FAIL("node 4 of 4 was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK_THAT(e.what(), Catch::Contains("the job has 4 nodes (0 to 3)"));
  }
}
