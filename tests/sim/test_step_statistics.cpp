// Step-time statistics over interleaved runs (step_statistics.hpp, pool_runs, summarize):
// quantiles, the noise floor and the suite's split of oversubscribed jobs, against values
// worked out by hand.
#include <catch2/catch.hpp>

#include <cmath>

#include "partune/validate/step_statistics.hpp"
#include "partune/validate/validation.hpp"

using namespace partune::validate;

TEST_CASE("quantiles interpolate between order statistics (numpy's default)", "[validation][statistics]") {
  CHECK(quantile({5, 1, 4, 2, 3}, 0.2) == Approx(1.8));  // position 0.8 between 1 and 2
  CHECK(quantile({5, 1, 4, 2, 3}, 0.5) == Approx(3.0));
  CHECK(quantile({4, 1, 3, 2}, 0.5) == Approx(2.5));
  CHECK(quantile({7}, 0.2) == Approx(7.0));
  CHECK(std::isnan(quantile({}, 0.5)));
}

TEST_CASE("two runs: the pooled low quantile, the median and the noise floor", "[validation][statistics]") {
  // Pooled and sorted: 1 2 2 3 3 4 4 5 5 6. The 20th percentile sits at position 1.8
  // (2 and 2), the median at 4.5 (3 and 4). Each run's own 20th percentile: 1.8 and 2.8,
  // so the runs land 1.0 / 1.8 = 55.6% apart.
  const StepStatistics s = step_statistics({{1, 2, 3, 4, 5}, {2, 3, 4, 5, 6}});
  CHECK(s.runs == 2);
  CHECK(s.samples == 10);
  CHECK(s.low == Approx(2.0));
  CHECK(s.median == Approx(3.5));
  CHECK(s.noise_floor_pct == Approx(100.0 / 1.8));
  CHECK(s.low_ci_lo <= s.low);
  CHECK(s.low_ci_hi >= s.low);
  CHECK(s.low_ci_lo >= 1.0);
  CHECK(s.low_ci_hi <= 6.0);
  // Deterministic: the same steps, the same interval.
  const StepStatistics again = step_statistics({{1, 2, 3, 4, 5}, {2, 3, 4, 5, 6}});
  CHECK(again.low_ci_lo == s.low_ci_lo);
  CHECK(again.low_ci_hi == s.low_ci_hi);
}

TEST_CASE("steps that never vary have no spread, one run has no noise floor", "[validation][statistics]") {
  const StepStatistics flat = step_statistics({{0.5, 0.5, 0.5}, {0.5, 0.5}});
  CHECK(flat.low_ci_lo == 0.5);
  CHECK(flat.low_ci_hi == 0.5);
  CHECK(flat.noise_floor_pct == 0.0);
  CHECK(std::isnan(step_statistics({{1, 2}}).noise_floor_pct));
  CHECK_THROWS_AS(step_statistics({}), std::invalid_argument);
  CHECK_THROWS_AS(step_statistics({{1.0}, {}}), std::invalid_argument);
}

TEST_CASE("an error inside the noise floor is noise, not a miss", "[validation][statistics]") {
  StepStatistics s;
  s.noise_floor_pct = 10;
  CHECK(within_noise(5, s));
  CHECK(within_noise(-10, s));
  CHECK_FALSE(within_noise(-12, s));
  s.noise_floor_pct = NAN;  // one run: unknown
  CHECK_FALSE(within_noise(0, s));
}

TEST_CASE("pooled runs: every run's steps, the median run's kinds and memory", "[validation][statistics]") {
  std::vector<Comparison> runs(3);
  const std::vector<std::vector<double>> steps = {{2.0, 2.0}, {1.0, 1.0}, {3.0, 3.0}};
  for (int i = 0; i < 3; ++i) {
    runs[i].predicted_step_s = 1.5;
    runs[i].timed_seconds = steps[i];
    runs[i].measured = step_statistics({steps[i]});
    runs[i].memory.push_back({i, 0, 1.0, 1.0, 0.0});
  }
  const Comparison c = pool_runs(runs);
  CHECK(c.memory.at(0).rank == 0);  // the run whose low quantile (2.0) is the middle one
  CHECK(c.timed_seconds.size() == 6);
  // Pooled 1 1 2 2 3 3: the 20th percentile at position 1.0 is 1.0; runs 1.0 and 3.0 apart
  // by 200%, so +50% is inside the noise.
  CHECK(c.measured_step_s == Approx(1.0));
  CHECK(c.step_error_pct == Approx(50.0));
  CHECK(c.measured.noise_floor_pct == Approx(200.0));
  CHECK(c.within_noise);
}

TEST_CASE("the suite's step errors leave oversubscribed jobs out, and summarise them apart",
          "[validation][statistics]") {
  std::vector<Comparison> c(3);
  c[0].step_error_pct = 5, c[1].step_error_pct = -30, c[2].step_error_pct = 15;
  const SuiteSummary s = summarize({{"a", &c[0], false}, {"b", &c[1], true}, {"c", &c[2], false}, {"d", nullptr, false}});
  CHECK(s.jobs == 4);
  CHECK(s.failed == 1);
  CHECK(s.median_abs_step_error_pct == Approx(10.0));
  CHECK(s.worst_abs_step_error_pct == Approx(15.0));
  CHECK(s.worst_job == "c");
  CHECK(s.oversubscribed == 1);
  CHECK(s.oversubscribed_median_abs_step_error_pct == Approx(30.0));
}
