#pragma once
// What a validation must reach to pass: the suite's step and memory errors (`partune
// validate`), and the ranking's agreement with measurement (`partune validate --search`,
// issue 14). A missed target is a sentence naming it, for the command's one line on
// standard error; exit status 1.
#include <string>

#include "partune/validate/ranking.hpp"
#include "partune/validate/validation.hpp"

namespace partune::validate {

// The suite's targets, as the summary prints them.
struct ValidationTargets {
  double median_step_error_pct = 10, worst_step_error_pct = 25, median_memory_error_pct = 10;
};
// The targets the suite missed ("median |step error| 12.3% > 10%; ..."), or "" when it
// met them all. A suite where no job ran misses them.
std::string missed_targets(const SuiteSummary& s, const ValidationTargets& t = {});

// Kendall's tau between predicted and measured throughput at least min_kendall_tau, and
// the predicted best at most max_regret_pct slower than the measured best.
struct RankingTargets {
  double min_kendall_tau = 0.8, max_regret_pct = 5.0;
};
// What the ranking missed ("Kendall's tau 0.62 < 0.8; regret 7.1% > 5%"), or "" when it
// met both. An undefined tau (ties) misses.
std::string missed_ranking_targets(const RankAgreement& a, const RankingTargets& t = {});

}  // namespace partune::validate
