// The search's shortcuts change nothing it reports: the memory verdict alone
// (estimate_memory) is estimate()'s, the ranking is the same on one thread and on two, and
// the placement orders it simulates once (data and pipeline orders over tensor groups
// that fill whole nodes) simulate to the same step when each is simulated.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/search/space.hpp"
#include "partune/search/tuner.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;
using namespace partune::search;
using testing::p4d_job;

TEST_CASE("estimate_memory is estimate's memory verdict on every point of a space", "[search][tier-one]") {
  const Job base = p4d_job("gpt3-2.7b", 2, 32);
  Job scratch = base;
  long points = 0, fitting = 0;
  enumerate(base, SearchSpace{}, [&](const Point& p) {
    apply(p, scratch);
    const Estimate e = estimate(scratch);
    const MemoryFit m = estimate_memory(scratch);
    ++points;
    fitting += e.fits ? 1 : 0;
    if (m.fits != e.fits || m.memory.total() != e.memory.total()) {
      INFO(describe(scratch));
      CHECK(m.fits == e.fits);
      CHECK(m.memory.total() == e.memory.total());
    }
  });
  CHECK(points > 1000);
  CHECK(fitting > 0);
  CHECK(fitting < points);  // both verdicts occur
}

TEST_CASE("the search ranks the same on one thread and on two", "[search][tier-one]") {
  const Job base = p4d_job("gpt3-2.7b", 2, 32);
  SearchOptions one, two;
  one.simulate = two.simulate = false;
  one.workers = 1;
  two.workers = 2;
  const SearchReport a = run_search(base, SearchSpace{}, one), b = run_search(base, SearchSpace{}, two);
  REQUIRE(a.estimated == b.estimated);
  CHECK(a.pruned_memory == b.pruned_memory);
  CHECK(a.pruned_dominated == b.pruned_dominated);
  REQUIRE(a.ranked.size() == b.ranked.size());
  for (std::size_t i = 0; i < a.ranked.size(); ++i) {
    INFO("rank " << i);
    CHECK(a.ranked[i].configuration == b.ranked[i].configuration);
    CHECK(a.ranked[i].estimate.step_time == b.ranked[i].estimate.step_time);
  }
}

TEST_CASE("PDT and DPT over node-filling tensor groups simulate to the same step", "[search][tier-one]") {
  // GPT-3 175B on 16 p4d nodes as pp8 x tp8 x dp2: the two orders only renumber nodes.
  auto placed = [](const char* order) {
    Job j = p4d_job("gpt3-175b", 16, 64);
    j.parallel.pipeline_parallel_degree = 8;
    j.parallel.tensor_parallel_degree = 8;
    j.parallel.microbatches = 16;
    j.parallel.placement_strategy = PlacementOrder::parse(order);
    testing::require_valid(j);
    return j;
  };
  sim::SimOptions every;
  every.use_symmetry = false;
  const double pdt = sim::simulate(placed("PDT"), every).metrics.step_time;
  const double dpt = sim::simulate(placed("DPT"), every).metrics.step_time;
  CHECK(std::fabs(pdt - dpt) <= 1e-9 * pdt);
}
