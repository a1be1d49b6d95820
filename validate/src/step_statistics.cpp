// Step-time statistics over interleaved runs (step_statistics.hpp).
#include "partune/validate/step_statistics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>

namespace partune::validate {

namespace {

constexpr int kResamples = 2000;
constexpr std::uint64_t kSeed = 20260525;  // fixed: the same steps give the same interval

}  // namespace

StepStatistics step_statistics(const std::vector<std::vector<double>>& runs) {
  if (runs.empty()) throw std::invalid_argument("step statistics of no run");
  StepStatistics s;
  s.runs = static_cast<int>(runs.size());
  std::vector<double> all, run_lows;
  for (const auto& r : runs) {
    if (r.empty()) throw std::invalid_argument("step statistics of a run without a timed step");
    all.insert(all.end(), r.begin(), r.end());
    run_lows.push_back(quantile(r, kLowQuantile));
  }
  s.samples = static_cast<int>(all.size());
  s.low = quantile(all, kLowQuantile);
  s.median = quantile(all, 0.5);
  const auto [lo, hi] = std::minmax_element(run_lows.begin(), run_lows.end());
  s.noise_floor_pct = runs.size() < 2 ? NAN : 100.0 * (*hi - *lo) / *lo;
  // Bootstrap: each resample draws every run's steps with replacement from that run (the
  // interleaved design kept), and takes the low quantile of the pooled draw.
  std::mt19937_64 rng(kSeed);
  std::vector<double> lows, draw(all.size());
  lows.reserve(kResamples);
  for (int b = 0; b < kResamples; ++b) {
    std::size_t k = 0;
    for (const auto& r : runs)
      for (std::size_t i = 0; i < r.size(); ++i) draw[k++] = r[rng() % r.size()];
    lows.push_back(quantile(draw, kLowQuantile));
  }
  s.low_ci_lo = quantile(lows, 0.025);
  s.low_ci_hi = quantile(lows, 0.975);
  return s;
}

bool within_noise(double error_pct, const StepStatistics& s) {
  return std::isfinite(error_pct) && std::isfinite(s.noise_floor_pct) && std::abs(error_pct) <= s.noise_floor_pct;
}

}  // namespace partune::validate
