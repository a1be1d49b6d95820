// Twins (search/twins.hpp): placement orders the model cannot tell apart are shown once,
// and nothing else is folded.
#include <catch2/catch.hpp>

#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/search/twins.hpp"

using namespace partune;
using namespace partune::search;
using testing::p4d_job;

namespace {

// GPT-3 175B on 16 p4d nodes (128 GPUs) as pp8 x tp8 x dp2, placed by `order`.
Candidate placed(const char* order) {
  Job j = p4d_job("gpt3-175b", 16, 256);
  j.parallel.pipeline_parallel_degree = 8;
  j.parallel.tensor_parallel_degree = 8;
  j.parallel.microbatches = 128;
  j.parallel.placement_strategy = PlacementOrder::parse(order);
  testing::require_valid(j);
  Candidate c;
  c.job = j;
  c.estimate = estimate(j);
  return c;
}

}  // namespace

TEST_CASE("tensor groups filling a node: PDT and DPT are twins, a tensor group across nodes is not") {
  // With tp8 on 8-GPU nodes, PDT and DPT both keep every tensor group in one node and put
  // each data-parallel and pipeline peer on another node: the same communication.
  const Candidate pdt = placed("PDT"), dpt = placed("DPT"), tdp = placed("TDP");
  CHECK(pdt.estimate.step_time == dpt.estimate.step_time);
  CHECK(are_twins(pdt, dpt));
  CHECK(are_twins(dpt, pdt));
  // TDP: the tensor axis slowest, its groups span 8 nodes: slower, so not a twin.
  CHECK(tdp.estimate.step_time > pdt.estimate.step_time);
  CHECK_FALSE(are_twins(pdt, tdp));
}

TEST_CASE("twins need the same configuration and the same figures") {
  const Candidate pdt = placed("PDT"), dpt = placed("DPT");
  SECTION("another knob differs (same figures)") {
    Candidate other = dpt;
    other.job.parallel.flash_attention = !other.job.parallel.flash_attention;
    CHECK_FALSE(are_twins(pdt, other));
  }
  SECTION("the estimated step differs by 0.1%") {
    Candidate other = dpt;
    other.estimate.step_time *= 1.001;
    CHECK_FALSE(are_twins(pdt, other));
  }
  SECTION("one simulated, the other not") {
    Candidate sim = dpt;
    sim.simulated = true;
    sim.simulation = sim.estimate;
    CHECK_FALSE(are_twins(pdt, sim));
  }
  SECTION("both simulated, to different steps") {
    Candidate a = pdt, b = dpt;
    a.simulated = b.simulated = true;
    a.simulation = a.estimate;
    b.simulation = b.estimate;
    CHECK(are_twins(a, b));
    b.simulation.step_time *= 1.01;
    CHECK_FALSE(are_twins(a, b));
  }
}

TEST_CASE("group_twins: one group per distinct configuration, in ranking order") {
  const Candidate pdt = placed("PDT"), dpt = placed("DPT"), tdp = placed("TDP");
  Candidate flash = pdt;
  flash.job.parallel.flash_attention = !flash.job.parallel.flash_attention;
  const std::vector<TwinGroup> groups = group_twins({pdt, tdp, dpt, flash});
  REQUIRE(groups.size() == 3);
  CHECK(groups[0].first == 0);
  CHECK(groups[0].twins == std::vector<std::size_t>{2});
  CHECK(groups[1].first == 1);
  CHECK(groups[1].twins.empty());
  CHECK(groups[2].first == 3);
  CHECK(group_twins({}).empty());
}
