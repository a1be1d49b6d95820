#pragma once
// Does a ranking by prediction order configurations the way measurement does?
// (`partune search --execute`): rank correlations between predicted and measured
// throughput, where the predicted best lands among the measured, and what choosing it
// cost against the measured best. Pure functions.
#include <vector>

namespace partune::validate {

// Kendall's tau-b of two equally long samples (ties counted as neither concordant nor
// discordant, and corrected for); NaN for fewer than 2 values or a constant sample.
double kendall_tau(const std::vector<double>& a, const std::vector<double>& b);

// Spearman's rho: Pearson's correlation of the ranks (tied values share their mean rank);
// NaN for fewer than 2 values or a constant sample.
double spearman_rho(const std::vector<double>& a, const std::vector<double>& b);

struct RankAgreement {
  double kendall_tau = 0, spearman_rho = 0;
  int predicted_best = 0;            // index of the largest predicted throughput
  int measured_best = 0;             // index of the largest measured throughput
  int measured_rank_of_predicted_best = 0;  // 1 = it is also the measured best
  // 100 (measured best - measured of the predicted best) / measured best: what trusting
  // the prediction cost. 0 when it picked the measured best.
  double regret_pct = 0;
};

// Throughputs (higher is better), one per configuration, in the same order. Throws
// std::invalid_argument when the sizes differ or there is no configuration.
RankAgreement rank_agreement(const std::vector<double>& predicted, const std::vector<double>& measured);

}  // namespace partune::validate
