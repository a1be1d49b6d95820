// The size gate at the simulator's entry (sim/src/simulate.cpp): a job whose simulation
// would not fit in memory is refused before any program is built or child forked:
// simulate() throws ScenarioError (bad input, exit 2 in the CLI), simulate_each() reports
// it as that job's outcome and still simulates the others.
#include <catch2/catch.hpp>

#include <chrono>

#include "job_fixtures.hpp"
#include "partune/costmodel/simulation_size.hpp"
#include "partune/sim/simulator.hpp"
#include "partune/costmodel/program_builder.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

// 960 ranks x 65536 micro-batches x 16 instructions: about 10^9 instructions, 250 GiB.
Job too_large() {
  Job j = p4d_job("gpt2-small", 120, 960 * 65536);
  j.parallel.microbatches = 65536;
  return j;
}

Job small() {
  Job j = p4d_job("gpt2-small", 1, 64);
  j.parallel.tensor_parallel_degree = 8;
  j.parallel.microbatches = 2;
  return j;
}

}  // namespace

TEST_CASE("a simulation too large for memory is refused at once", "[sim][size-gate]") {
  const Job big = too_large();
  require_valid(big);
  if (simulation_size(big, big.world_size(), Granularity::chunk, false).bytes <= simulation_memory_limit()) {
    WARN("this machine holds a 250 GiB simulation: nothing to refuse");
    return;
  }
  sim::SimOptions no_symmetry;
  no_symmetry.use_symmetry = false;
  const auto start = std::chrono::steady_clock::now();
  try {
    sim::simulate(big, no_symmetry);
    FAIL("not refused");
  } catch (const ScenarioError& e) {
    CHECK_THAT(e.reason(), Catch::Contains("instructions on 960 ranks") && Catch::Contains("the limit is"));
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));

  const std::vector<sim::SimOutcome> out = sim::simulate_each({big, small()}, no_symmetry, 2);
  REQUIRE(out.size() == 2);
  CHECK_FALSE(out[0].ok);
  CHECK_THAT(out[0].error, Catch::Contains("the limit is"));
  CHECK(out[1].ok);
  CHECK(out[1].result.metrics.step_time > 0);
}
