#pragma once
// The statistic every measurement of partune is judged on (validate, search --execute,
// calibrate): a low quantile of repeated timings. Interference on a shared machine only
// ever slows a run down, so the undisturbed time is near the low end; the 20th
// percentile keeps away from the single luckiest timing. Pure.
#include <vector>

namespace partune {

inline constexpr double kLowQuantile = 0.2;

// The q-quantile (0 <= q <= 1) with linear interpolation between order statistics
// (type 7, as numpy's default); NaN for no values.
double quantile(std::vector<double> values, double q);

}  // namespace partune
