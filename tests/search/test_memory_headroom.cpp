// The search keeps a stated share of the GPU's memory free (SearchOptions::memory_headroom,
// `partune search --memory-headroom`): issue 29 found its pick for GPT-3 175B on 64
// A100-80GB leaving under 1 GiB of 80, which no engineer would launch.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/units.hpp"
#include "partune/search/space.hpp"
#include "partune/search/tuner.hpp"

using namespace partune;
using namespace partune::search;

namespace {

// GPT-3 175B, global batch 1920, on 8 p4de nodes (64 A100-80GB), tensor 4 x pipeline 8
// (the layout the search picks there), every other knob free.
Job gpt3_on_64_a100_80gb() {
  Job j = testing::p4d_job("gpt3-175b", 8, 1920);
  j.cluster.instance = load_instance_type("p4de.24xlarge");
  return j;
}

SearchReport search_with(double headroom) {
  SearchSpace space;
  restrict_space(space, "tensor_parallel_degree=4");
  restrict_space(space, "pipeline_parallel_degree=8");
  restrict_space(space, "placement_strategy=PTD");
  SearchOptions options;
  options.simulate = false;
  options.memory_headroom = headroom;
  options.auto_partition = false;  // the configurations as enumerated (explain names them so)
  return run_search(gpt3_on_64_a100_80gb(), space, options);
}

}  // namespace

TEST_CASE("the search leaves the stated share of HBM free", "[search][headroom]") {
  const double hbm = 80.0 * units::GiB;
  const SearchReport tight = search_with(0.0), kept = search_with(0.10);
  REQUIRE(!tight.ranked.empty());
  REQUIRE(!kept.ranked.empty());
  const Candidate& a = tight.ranked.front();
  const Candidate& b = kept.ranked.front();
  INFO("headroom 0: " << describe(a.job) << " peaks at " << a.estimate.memory.total() / units::GiB << " GiB; 10%: "
                      << describe(b.job) << " at " << b.estimate.memory.total() / units::GiB << " GiB");
  // Without headroom the fastest configuration fills the HBM past 90%; with 10% the pick
  // leaves at least 8 GiB, and no ranked candidate peaks above 72 GiB.
  CHECK(a.estimate.memory.total() > 0.9 * hbm);
  CHECK(b.estimate.memory.total() <= 0.9 * hbm);
  for (const Candidate& c : kept.ranked) CHECK(c.estimate.memory.total() <= 0.9 * hbm);
  // A constraint cannot speed the pick up, and prunes at least what it pruned before.
  CHECK(b.estimate.step_time >= a.estimate.step_time);
  CHECK(kept.pruned_memory > tight.pruned_memory);
  CHECK(kept.memory_limit == Approx(0.9 * hbm));

  // The tight pick is among the headroom run's pruned points, and explain() says why.
  const Job& dropped = a.job;
  const std::vector<std::string> exact = {
      "microbatch_size=" + std::to_string(dropped.microbatch_size()),
      std::string("activation_checkpointing=") + to_string(dropped.parallel.activation_checkpointing),
      std::string("pipeline=") + to_string(dropped.parallel.pipeline),
      "virtual_stages=" + std::to_string(dropped.parallel.virtual_stages),
      std::string("shard_optimizer_state=") + (dropped.parallel.shard_optimizer_state ? "true" : "false"),
      std::string("flash_attention=") + (dropped.parallel.flash_attention ? "true" : "false"),
      std::string("sequence_parallel=") + (dropped.parallel.sequence_parallel ? "true" : "false")};
  bool found = false;
  for (const std::string& line : explain(kept, gpt3_on_64_a100_80gb(), exact, 1000))
    found = found || (line.rfind(describe(dropped), 0) == 0 && line.find("10% headroom") != std::string::npos);
  CHECK(found);
}
