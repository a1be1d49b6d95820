// Rank agreement between predicted and measured throughput (validate/ranking.hpp) and the
// candidates --execute runs (search/execution_sample.hpp), against values by hand.
#include <catch2/catch.hpp>

#include <cmath>

#include "partune/search/execution_sample.hpp"
#include "partune/validate/ranking.hpp"

using namespace partune;

TEST_CASE("Kendall's tau and Spearman's rho, worked by hand", "[ranking]") {
  CHECK(validate::kendall_tau({1, 2, 3, 4}, {10, 20, 30, 40}) == Approx(1.0));
  CHECK(validate::kendall_tau({1, 2, 3, 4}, {40, 30, 20, 10}) == Approx(-1.0));
  // Pairs of (1,2,3,4) vs (1,3,2,4): 6 pairs, one discordant (2,3): (5 - 1) / 6.
  CHECK(validate::kendall_tau({1, 2, 3, 4}, {1, 3, 2, 4}) == Approx(4.0 / 6.0));
  // Ranks differ by d = (0, 1, -1, 0): rho = 1 - 6 x 2 / (4 x 15) = 0.8.
  CHECK(validate::spearman_rho({1, 2, 3, 4}, {1, 3, 2, 4}) == Approx(0.8));
  // Ties share the mean rank: (1, 2.5, 2.5, 4) against (1, 2, 3, 4).
  CHECK(validate::spearman_rho({1, 2, 2, 4}, {1, 2, 3, 4}) == Approx(4.5 / std::sqrt(4.5 * 5.0)));
  // tau-b with one tie in a: 5 concordant, 0 discordant, 1 tied in a only: 5 / sqrt(5 x 6).
  CHECK(validate::kendall_tau({1, 2, 2, 4}, {1, 2, 3, 4}) == Approx(5.0 / std::sqrt(30.0)));
  CHECK(std::isnan(validate::kendall_tau({1}, {2})));
  CHECK(std::isnan(validate::spearman_rho({3, 3, 3}, {1, 2, 3})));
}

TEST_CASE("the predicted best's measured rank and the regret of trusting it", "[ranking]") {
  // Predicted throughputs say #0 is best; measured, #1 is (11 vs 10): #0 is measured 2nd,
  // and choosing it cost 1/11 of the best.
  const validate::RankAgreement a = validate::rank_agreement({30, 20, 10}, {10, 11, 5});
  CHECK(a.predicted_best == 0);
  CHECK(a.measured_best == 1);
  CHECK(a.measured_rank_of_predicted_best == 2);
  CHECK(a.regret_pct == Approx(100.0 / 11.0));
  CHECK(a.kendall_tau == Approx(1.0 / 3.0));  // pairs: (0,1) discordant, (0,2) and (1,2) concordant
  const validate::RankAgreement right = validate::rank_agreement({3, 2, 1}, {30, 20, 10});
  CHECK(right.measured_rank_of_predicted_best == 1);
  CHECK(right.regret_pct == 0.0);
  CHECK_THROWS_AS(validate::rank_agreement({1, 2}, {1}), std::invalid_argument);
  CHECK_THROWS_AS(validate::rank_agreement({}, {}), std::invalid_argument);
}

TEST_CASE("search --execute runs the top K and K more down to the bottom of the ranking", "[ranking]") {
  // 20 ranked, K 5: 0..4, then 5 + 14 x j / 5 for j = 1..5 rounded: 8, 11, 13, 16, 19.
  CHECK(search::execution_sample(20, 5) == std::vector<std::size_t>{0, 1, 2, 3, 4, 8, 11, 13, 16, 19});
  CHECK(search::execution_sample(6, 3) == std::vector<std::size_t>{0, 1, 2, 3, 4, 5});  // all: 6 <= 2K
  CHECK(search::execution_sample(3, 5) == std::vector<std::size_t>{0, 1, 2});
  CHECK(search::execution_sample(40, 1) == std::vector<std::size_t>{0, 39});
}
