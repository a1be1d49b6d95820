// Tier 2's bound (SearchOptions::simulation_budget): a candidate whose simulation would
// hold more instructions than the budget keeps the estimator's figures, says why, and is
// ranked by them among the simulated ones; those within it simulate as without a budget.
// The size the bound reads (sim::planned_simulation_size) counts the ranks the simulator
// really runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "job_fixtures.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/search/space.hpp"
#include "partune/search/tuner.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;
using namespace partune::search;
using testing::p4d_job;

namespace {

SearchOptions top(int k, double budget) {
  SearchOptions o;
  o.top_k = k;
  o.workers = 2;
  o.simulation_budget = budget;
  return o;
}

double planned(const Job& job) { return sim::planned_simulation_size(job, sim::SimOptions{}).instructions; }

}  // namespace

TEST_CASE("candidates beyond the simulation budget keep their estimates, the others simulate as before",
          "[search][budget]") {
  const Job base = p4d_job("gpt3-2.7b", 2, 32);
  const SearchReport all = run_search(base, SearchSpace{}, top(6, 1e12));
  std::map<std::string, double> simulated_step;  // configuration -> simulated step
  double smallest = 1e300, largest = 0;
  for (const Candidate& c : all.ranked)
    if (c.simulated) {
      simulated_step[c.configuration] = c.simulation.step_time;
      smallest = std::min(smallest, planned(c.job));
      largest = std::max(largest, planned(c.job));
    }
  REQUIRE(simulated_step.size() >= 4);
  REQUIRE(smallest < largest);  // the budget below splits them
  const double budget = (smallest + largest) / 2;

  const SearchReport bounded = run_search(base, SearchSpace{}, top(6, budget));
  long beyond = 0, judged = 0;
  for (const Candidate& c : bounded.ranked) {
    if (!c.judged()) continue;
    ++judged;
    INFO(c.configuration);
    if (planned(c.job) > budget) {
      ++beyond;
      CHECK_FALSE(c.simulated);
      CHECK(c.beyond_budget.find("budget") != std::string::npos);
    } else {
      REQUIRE(c.simulated);
      CHECK(c.beyond_budget.empty());
      REQUIRE(simulated_step.count(c.configuration) == 1);
      CHECK(c.simulation.step_time == simulated_step[c.configuration]);
    }
  }
  CHECK(beyond > 0);
  CHECK(beyond < judged);
  CHECK(bounded.beyond_budget == beyond);
  // The judged ones lead the ranking, by their step (simulated, or estimated beyond it).
  for (std::size_t i = 1; i < bounded.ranked.size(); ++i)
    if (bounded.ranked[i].judged()) {
      CHECK(bounded.ranked[i - 1].judged());
      CHECK(bounded.ranked[i - 1].score() <= bounded.ranked[i].score());
    }
}

TEST_CASE("with a budget below every simulation the search ranks by the estimator", "[search][budget]") {
  const Job base = p4d_job("gpt3-2.7b", 2, 32);
  SearchOptions estimator_only = top(4, 1e12);
  estimator_only.simulate = false;
  const SearchReport e = run_search(base, SearchSpace{}, estimator_only);
  const SearchReport b = run_search(base, SearchSpace{}, top(4, 1));
  REQUIRE_FALSE(b.ranked.empty());
  CHECK(b.beyond_budget == 4);
  CHECK(b.simulation_failures == 0);
  CHECK(b.ranked.front().configuration == e.ranked.front().configuration);
  CHECK_FALSE(b.ranked.front().simulated);
}

TEST_CASE("the planned simulation counts the ranks the simulator runs", "[search][budget]") {
  // Folded by blocks of replicas (a sharded group spanning two nodes), by tensor groups,
  // and by blocks of the replicas a node holds.
  const char* cases[] = {
      "tensor_parallel_degree: 2, placement_strategy: PTD, sharded_data_parallel_degree: 8, "
      "activation_checkpointing: full, microbatches: 2",
      "pipeline_parallel_degree: 2, tensor_parallel_degree: 8, microbatches: 4",
      "microbatches: 1",
  };
  for (const char* parallel : cases) {
    INFO(parallel);
    const Job job = parse_job(std::string("model: gpt3-2.7b\ncluster: {instance_type: p4d.24xlarge, nodes: 8}\n") +
                                  "training: {global_batch: 64, precision: fp16}\nparallel: {" + parallel + "}\n",
                              "planned-size");
    const sim::SimResult r = sim::simulate(job);
    CHECK(sim::planned_simulation_size(job, sim::SimOptions{}).ranks == static_cast<double>(r.ranks.size()));
  }
}
