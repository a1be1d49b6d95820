// `partune validate` exits 1 when the suite misses a target it prints: missed_targets()
// against summaries on either side of each target (10%, 25%, 10%).
#include <catch2/catch.hpp>

#include <cmath>

#include "partune/validate/targets.hpp"

using namespace partune;
using partune::validate::missed_targets;

namespace {
validate::SuiteSummary summary(double median, double worst, double memory) {
  validate::SuiteSummary s;
  s.jobs = 3;
  s.median_abs_step_error_pct = median;
  s.worst_abs_step_error_pct = worst;
  s.worst_job = "j";
  s.median_abs_memory_error_pct = memory;
  return s;
}
}  // namespace

TEST_CASE("validate's targets: met at the limits, missed past them, each named", "[validate]") {
  CHECK(missed_targets(summary(10, 25, 10)).empty());
  CHECK(missed_targets(summary(3.2, 7.9, 1.5)).empty());
  CHECK(missed_targets(summary(12.34, 20, 4)) == "median |step error| 12.3% > 10%");
  CHECK(missed_targets(summary(5, 31, 4)) == "worst |step error| 31.0% > 25%");
  CHECK(missed_targets(summary(5, 20, 10.5)) == "median |memory error| 10.5% > 10%");
  CHECK(missed_targets(summary(11, 26, 12)) ==
        "median |step error| 11.0% > 10%; worst |step error| 26.0% > 25%; median |memory error| 12.0% > 10%");
}

TEST_CASE("validate's targets: a suite where no job ran, or nothing was measured, misses them", "[validate]") {
  validate::SuiteSummary none;
  none.median_abs_step_error_pct = NAN;
  CHECK(missed_targets(none) == "no job ran");
  CHECK(missed_targets(summary(5, 20, NAN)) == "median |memory error| not measured");
}
