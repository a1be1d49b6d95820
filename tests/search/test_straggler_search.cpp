// The search under a straggler model (SearchOptions::slowdowns, search --slow): its
// candidates are simulated with the slow GPUs, so the winner's figure is its simulation
// with them, and slower than without.
#include <catch2/catch.hpp>

#include "job_fixtures.hpp"
#include "partune/search/space.hpp"
#include "partune/search/tuner.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;
using namespace partune::search;

TEST_CASE("the search ranks its simulated candidates under slow GPUs", "[search][stragglers]") {
  const Job base = testing::p4d_job("gpt2-small", 1, 16);
  SearchSpace space;
  for (const char* f : {"pipeline_parallel_degree=1", "tensor_parallel_degree=1,2", "sharded_data_parallel_degree=1",
                        "activation_checkpointing=none", "flash_attention=true", "shard_optimizer_state=false",
                        "sequence_parallel=false"})
    restrict_space(space, f);
  SearchOptions options;
  options.top_k = 2;
  const SearchReport plain = run_search(base, space, options);
  options.slowdowns = {sim::parse_slowdown("rank=3:1.5")};
  const SearchReport slow = run_search(base, space, options);
  REQUIRE_FALSE(plain.ranked.empty());
  REQUIRE_FALSE(slow.ranked.empty());
  const Candidate& winner = slow.ranked.front();
  REQUIRE(winner.simulated);
  sim::SimOptions so;
  so.slowdowns = options.slowdowns;
  CHECK(winner.simulation.step_time == Approx(sim::simulate(winner.job, so).metrics.step_time).epsilon(1e-12));
  CHECK(winner.simulation.step_time > plain.ranked.front().simulation.step_time);
}
