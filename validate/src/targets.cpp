// The validation's targets (targets.hpp).
#include "partune/validate/targets.hpp"

#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace partune::validate {

std::string missed_targets(const SuiteSummary& s, const ValidationTargets& t) {
  if (s.worst_abs_step_error_pct < 0) return "no job ran";
  std::string missed;
  const auto check = [&](const char* what, double value, double target) {
    if (value <= target) return;
    missed += missed.empty() ? "" : "; ";
    // NaN: nothing measured, which misses too.
    missed += std::isfinite(value) ? fmt::format("{} {:.1f}% > {:g}%", what, value, target)
                                   : fmt::format("{} not measured", what);
  };
  check("median |step error|", s.median_abs_step_error_pct, t.median_step_error_pct);
  check("worst |step error|", s.worst_abs_step_error_pct, t.worst_step_error_pct);
  check("median |memory error|", s.median_abs_memory_error_pct, t.median_memory_error_pct);
  return missed;
}

std::string missed_ranking_targets(const RankAgreement& a, const RankingTargets& t) {
  std::vector<std::string> missed;
  if (!std::isfinite(a.kendall_tau) || a.kendall_tau < t.min_kendall_tau)
    missed.push_back(!std::isfinite(a.kendall_tau)
                         ? std::string("Kendall's tau undefined (ties)")
                         : fmt::format("Kendall's tau {:.2f} < {:.1f}", a.kendall_tau, t.min_kendall_tau));
  if (a.regret_pct > t.max_regret_pct) missed.push_back(fmt::format("regret {:.1f}% > {:.0f}%", a.regret_pct, t.max_regret_pct));
  return fmt::format("{}", fmt::join(missed, "; "));
}

}  // namespace partune::validate
