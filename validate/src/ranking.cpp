// Rank correlations between predicted and measured throughput (ranking.hpp).
#include "partune/validate/ranking.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace partune::validate {

namespace {

int sign(double x) { return (x > 0) - (x < 0); }

// 1-based ranks, ties sharing their mean rank.
std::vector<double> ranks(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return v[x] < v[y]; });
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double mean = 0.5 * static_cast<double>(i + j) + 1.0;
    for (std::size_t k = i; k <= j; ++k) r[order[k]] = mean;
    i = j + 1;
  }
  return r;
}

int arg_max(const std::vector<double>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

double kendall_tau(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("kendall_tau: samples of different sizes");
  double concordant = 0, discordant = 0, ties_a = 0, ties_b = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    for (std::size_t j = i + 1; j < a.size(); ++j) {
      const int s = sign(a[i] - a[j]) * sign(b[i] - b[j]);
      if (s > 0) ++concordant;
      else if (s < 0) ++discordant;
      else if (a[i] == a[j] && b[i] != b[j]) ++ties_a;
      else if (b[i] == b[j] && a[i] != a[j]) ++ties_b;
    }
  const double denominator = std::sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b));
  return denominator > 0 ? (concordant - discordant) / denominator : NAN;
}

double spearman_rho(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("spearman_rho: samples of different sizes");
  if (a.size() < 2) return NAN;
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double mean = 0.5 * static_cast<double>(a.size() + 1);
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : NAN;
}

RankAgreement rank_agreement(const std::vector<double>& predicted, const std::vector<double>& measured) {
  if (predicted.size() != measured.size()) throw std::invalid_argument("rank_agreement: samples of different sizes");
  if (predicted.empty()) throw std::invalid_argument("rank_agreement: no configuration");
  RankAgreement r;
  r.kendall_tau = kendall_tau(predicted, measured);
  r.spearman_rho = spearman_rho(predicted, measured);
  r.predicted_best = arg_max(predicted);
  r.measured_best = arg_max(measured);
  const double chosen = measured[static_cast<std::size_t>(r.predicted_best)];
  r.measured_rank_of_predicted_best =
      1 + static_cast<int>(std::count_if(measured.begin(), measured.end(), [&](double m) { return m > chosen; }));
  const double best = measured[static_cast<std::size_t>(r.measured_best)];
  r.regret_pct = 100.0 * (best - chosen) / best;
  return r;
}

}  // namespace partune::validate
