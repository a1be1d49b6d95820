// Time-to-train and cost (training_cost.hpp) against the arithmetic written out here, and
// the instance types' prices as their files state them.
#include <catch2/catch.hpp>

#include <cmath>

#include "job_fixtures.hpp"
#include "partune/costmodel/training_cost.hpp"

using namespace partune;

TEST_CASE("time-to-train and cost on demand and on spot, by hand", "[cost]") {
  Job j = partune::testing::p4d_job("gpt2-small", 16, 512);  // 512 x 1024 tokens a step
  TrainingCostOptions o;
  o.tokens = 512.0 * 1024 * 1000;  // 1000 steps
  const TrainingCost c = training_cost(j, 3.6, o);
  CHECK(c.steps == Approx(1000));
  CHECK(c.seconds == Approx(3600));  // one hour
  // p4d.24xlarge's file: 21.957642 USD a node-hour on demand, 16 nodes.
  CHECK(c.on_demand_usd == Approx(16 * 21.957642));
  CHECK_FALSE(c.has_spot);  // its file gives no interruption rate
  // 5% of nodes a month: 16 x 0.05 / 730 interruptions an hour, each losing half of a
  // 1-hour checkpoint interval and a 15-minute restart.
  o.interruptions_per_month = 0.05;
  const TrainingCost s = training_cost(j, 3.6, o);
  REQUIRE(s.has_spot);
  const double rate = 16 * 0.05 / 730, lost = rate * (0.5 + 0.25);
  CHECK(s.spot_interruptions_per_hour == Approx(rate));
  CHECK(s.spot_seconds == Approx(3600 / (1 - lost)));
  CHECK(s.spot_usd == Approx(s.spot_seconds / 3600 * 16 * 6.289));
  // A rate at which the job loses work as fast as it makes it never ends.
  o.interruptions_per_month = 1.0;
  o.checkpoint_interval_h = 200;
  CHECK(std::isinf(training_cost(j, 3.6, o).spot_seconds));
  // Without a budget there is nothing to price.
  CHECK(training_cost(j, 3.6, TrainingCostOptions{}).seconds == 0);
}
