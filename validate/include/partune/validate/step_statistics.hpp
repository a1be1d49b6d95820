#pragma once
// A step time measured on a shared machine, with its own uncertainty (`partune validate`).
// A job's timed steps come from several runs interleaved with the other jobs of a suite
// (A B C A B C), so slow periods of the machine fall on every job alike. Interference
// only ever slows a step down, so the undisturbed time is near the low end: the figure a
// prediction is judged on is a low quantile of every timed step (kLowQuantile), with a
// bootstrap interval, the median beside it, and the job's noise floor (how far apart
// repeated runs of the same job land). Pure functions, deterministic.
#include <vector>

#include "partune/costmodel/quantile.hpp"

namespace partune::validate {

// The quantile the step error is computed on: the 20th percentile of the timed steps
// (costmodel/quantile.hpp, the statistic calibrate times its kernels with too).
using partune::kLowQuantile;
using partune::quantile;

struct StepStatistics {
  int runs = 0, samples = 0;
  double low = 0;            // kLowQuantile of every timed step of every run
  double low_ci_lo = 0, low_ci_hi = 0;  // its 95% bootstrap interval (steps resampled within each run)
  double median = 0;         // of every timed step
  // 100 (largest - smallest) / smallest over the runs' own low quantiles: how far apart
  // repeated runs of the same job land. NaN with one run (unknown).
  double noise_floor_pct = 0;
};

// `runs`: each run's timed steps (warm-up left out). Throws std::invalid_argument when
// there is no run or a run has no step.
StepStatistics step_statistics(const std::vector<std::vector<double>>& runs);

// Whether an error (percent) is inside the job's noise floor: not a miss, but noise.
bool within_noise(double error_pct, const StepStatistics& s);

}  // namespace partune::validate
