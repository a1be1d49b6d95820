// Routing imbalance as a stated distribution (issue 30): model.expert_load_skew s gives
// expert i a share (i + 1)^-s / H of the routed tokens (Zipf); each expert computes
// max(its padded capacity, its load), and the expert rank holding the busiest block of
// experts paces the layer. Closed forms for 8 experts, 2 a token, s = 1, written out here:
// H_8 = 761 / 280, so expert i's load over an even share is 8 x 280 / (761 (i + 1)) =
// 2240 / (761 (i + 1)): 2.94, 1.47, 0.98, 0.74, ... of which only the first two exceed a
// capacity factor of 1.
#include <catch2/catch.hpp>

#include <string>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;
using partune::testing::scenario_error_key;

namespace {

ModelSpec skewed_mixtral(double skew) {
  ModelSpec m = load_model("mixtral-8x7b");
  m.expert_load_skew = skew;
  return m;
}

}  // namespace

TEST_CASE("the busiest expert rank's load, by hand", "[moe][imbalance]") {
  const ModelSpec m = skewed_mixtral(1.0);
  REQUIRE(m.experts == 8);
  REQUIRE(m.capacity_factor == 1.0);
  // One rank holds all 8: the two overloaded experts' loads, six at capacity.
  CHECK(m.busiest_expert_rank_load(1) == Approx((2240.0 / 761 + 1120.0 / 761 + 6) / 8).epsilon(1e-12));
  // Two ranks of 4: rank 0 holds experts 0-3 (2.94 + 1.47 + 1 + 1); ep / (E cf) = 1 / 4.
  CHECK(m.busiest_expert_rank_load(2) == Approx((2240.0 / 761 + 1120.0 / 761 + 2) / 4).epsilon(1e-12));
  // One expert a rank: the most loaded expert alone.
  CHECK(m.busiest_expert_rank_load(8) == Approx(2240.0 / 761).epsilon(1e-12));
  // Balanced: 1 at any degree; a capacity of 3 covers every load (2.94 < 3).
  CHECK(skewed_mixtral(0).busiest_expert_rank_load(2) == 1.0);
  ModelSpec padded = m;
  padded.capacity_factor = 3.0;
  CHECK(padded.busiest_expert_rank_load(8) == 1.0);
}

TEST_CASE("a skewed router slows the experts of the busiest rank, not the useful FLOPs", "[moe][imbalance]") {
  PlanConfig c;
  c.sequences = 1;
  c.expert_degree = 2;
  const LayerPlan even = moe_layer_plan(skewed_mixtral(0), c), skewed = moe_layer_plan(skewed_mixtral(1), c);
  const double f = (2240.0 / 761 + 1120.0 / 761 + 2) / 4;
  for (PlanOpRole r : {PlanOpRole::expert_fc1, PlanOpRole::expert_fc2})
    CHECK(skewed.op(r).flops == Approx(f * even.op(r).flops).epsilon(1e-12));
  CHECK(skewed.op(PlanOpRole::dispatch).comm_bytes == Approx(f * even.op(PlanOpRole::dispatch).comm_bytes).epsilon(1e-12));
  CHECK(skewed.op(PlanOpRole::qkv).flops == even.op(PlanOpRole::qkv).flops);
  // Model FLOPs (MFU) count the routed tokens however they are spread.
  CHECK(model_flops_per_step(skewed_mixtral(1), 8) == model_flops_per_step(skewed_mixtral(0), 8));
  // The step: slower with the skew.
  Job job = load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/mixtral-8x7b-p4d-8.yaml");
  const double balanced = estimate(job).step_time;
  job.model.expert_load_skew = 1.0;
  CHECK(estimate(job).step_time > balanced);
}

TEST_CASE("expert_load_skew: read, written, refused on a dense model", "[moe][imbalance][scenario]") {
  const std::string head = "kind: job\nname: t\ncluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
                           "training: {global_batch: 8}\n";
  const Job job = parse_job(head + "model: {base: mixtral-8x7b, expert_load_skew: 0.8}\n", "skew.yaml");
  CHECK(job.model.expert_load_skew == 0.8);
  CHECK(parse_job(job_yaml(job, "test"), "written.yaml").model.expert_load_skew == 0.8);
  CHECK(scenario_error_key(head + "model: {base: gpt2-small, expert_load_skew: 1}\n", "f.yaml") ==
        "model.expert_load_skew");
  CHECK(scenario_error_key(head + "model: {base: mixtral-8x7b, expert_load_skew: -1}\n", "f.yaml") ==
        "model.expert_load_skew");
}
