// Failures, checkpoints and goodput (goodput.hpp, issue 32) against closed forms written
// out by hand and the Llama 3 paper's interruption count:
//   - Daly's first-order interval tau* = sqrt(2 delta M) - delta (delta < 2 M; Young's
//     sqrt(2 delta M) to first order), M when delta >= 2 M;
//   - goodput(tau) = tau / (tau + delta) (1 - lambda (restart + restore + (tau + delta) / 2)),
//     highest at tau*;
//   - Llama 3 405B on 16,384 H100s fails once every 54 x 24 / 419 = 3.09 hours, its
//     checkpoint holds 14 bytes a parameter (bf16 weights, fp32 master weights and two
//     Adam moments).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/goodput.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/training_cost.hpp"

using namespace partune;

namespace {
Job llama_405b() { return load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/llama-3-405b-p5-2048.yaml"); }
}  // namespace

TEST_CASE("Young/Daly: the checkpoint interval in closed form", "[goodput]") {
  // delta 60 s, M one hour: sqrt(2 x 60 x 3600) - 60 = sqrt(432000) - 60 = 657.267 - 60.
  CHECK(young_daly_interval(60.0, 3600.0) == Approx(597.2670).epsilon(1e-6));
  // delta 30 s, M 10 hours: sqrt(2 x 30 x 36000) - 30 = 1469.694 - 30.
  CHECK(young_daly_interval(30.0, 36000.0) == Approx(1439.6939).epsilon(1e-6));
  // A checkpoint longer than two MTBFs: checkpoint every MTBF.
  CHECK(young_daly_interval(100.0, 40.0) == 40.0);
  // Nothing fails: no checkpoint is needed.
  CHECK(std::isinf(young_daly_interval(60.0, std::numeric_limits<double>::infinity())));
}

TEST_CASE("goodput at an interval, by hand, and Daly's interval near its best", "[goodput]") {
  Resilience r;
  r.failures_per_second = 1.0 / 3600;  // M = 1 hour
  r.write_seconds = r.restore_seconds = 60;
  r.restart_seconds = 900;
  // tau = 1200 s: 1200 / 1260 x (1 - (900 + 60 + 630) / 3600) = 0.952381 x 0.558333.
  CHECK(goodput_at(r, 1200) == Approx(0.531746).epsilon(1e-5));
  const Goodput g = goodput(r);
  CHECK(g.interval == Approx(597.2670).epsilon(1e-6));
  CHECK(g.fraction == Approx(goodput_at(r, g.interval)));
  // Daly's interval is first order: with a checkpoint of a sixtieth of the MTBF it is
  // within half a point of the best interval (a grid from a fifth to five times it).
  double best = 0;
  for (double f = 0.2; f <= 5.0; f += 0.01) best = std::max(best, goodput_at(r, f * g.interval));
  CHECK(g.fraction > best - 0.005);
  CHECK(goodput_at(r, 0.5 * g.interval) < g.fraction);
  CHECK(goodput_at(r, 2.0 * g.interval) < g.fraction);
  // Without failures only the checkpoints' own time is lost; with none needed, nothing.
  Resilience safe = r;
  safe.failures_per_second = 0;
  CHECK(goodput(safe).fraction == 1.0);
  CHECK(goodput_at(safe, 540) == Approx(0.9));
}

TEST_CASE("Llama 3 405B on 16,384 H100s: the paper's failure rate, its checkpoint, its goodput", "[goodput]") {
  const Job job = llama_405b();
  REQUIRE(job.world_size() == 16384);
  const Resilience r = resilience(job);
  // 419 unexpected interruptions in 54 days: one every 54 x 24 / 419 hours.
  CHECK(r.mtbf_seconds() / 3600 == Approx(54.0 * 24 / 419).epsilon(1e-4));
  // 2 + 4 + 4 + 4 bytes a parameter, every parameter once.
  CHECK(r.checkpoint_bytes == Approx(14 * total_parameters(job.model)).epsilon(1e-12));
  // Written by 2,048 nodes at 2.4 GB/s each.
  CHECK(r.write_seconds == Approx(r.checkpoint_bytes / (2048 * 2.4e9)).epsilon(1e-12));
  CHECK(r.restart_seconds == 900);
  const Goodput g = goodput(r);
  CHECK(g.interval == Approx(std::sqrt(2 * r.write_seconds * r.mtbf_seconds()) - r.write_seconds));
  // A checkpoint of a second against an MTBF of hours: Daly's interval is the best to 1e-4.
  for (double f : {0.8, 0.9, 1.1, 1.25}) CHECK(goodput_at(r, f * g.interval) < g.fraction + 1e-4);
  // A restart and a restore every 3.1 hours, and half an interval of lost work: 90.5%
  // (Meta reports "higher than 90% effective training time").
  CHECK(g.fraction > 0.90);
  CHECK(g.fraction < 0.95);
  // The time-to-train with failures is the failure-free one over the goodput.
  TrainingCostOptions o;
  o.tokens = 15.6e12;
  const TrainingCost c = training_cost(job, estimate(job).step_time, o);
  CHECK(c.failure_seconds == Approx(c.seconds / g.fraction));
  CHECK(c.checkpoint_interval == Approx(g.interval));
}

TEST_CASE("an instance type without failures: goodput 1, no checkpoint needed", "[goodput]") {
  const Job job = load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/gpt2-small-local-cpu.yaml");
  const Goodput g = goodput(resilience(job));
  CHECK(g.fraction == 1.0);
  CHECK(std::isinf(g.interval));
}
