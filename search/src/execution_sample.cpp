// The candidates --execute runs (execution_sample.hpp).
#include "partune/search/execution_sample.hpp"

#include <cmath>
#include <set>

namespace partune::search {

std::vector<std::size_t> execution_sample(std::size_t ranked, std::size_t k) {
  std::set<std::size_t> picked;
  for (std::size_t i = 0; i < ranked && i < k; ++i) picked.insert(i);
  if (ranked > 2 * k && k > 0) {
    // K points over the rest: the j-th at K + (rest - 1) * (j + 1) / K, the last one the bottom.
    const std::size_t rest = ranked - k;
    for (std::size_t j = 0; j < k; ++j)
      picked.insert(k + static_cast<std::size_t>(std::llround(static_cast<double>(rest - 1) * static_cast<double>(j + 1) /
                                                              static_cast<double>(k))));
  } else {
    for (std::size_t i = k; i < ranked; ++i) picked.insert(i);
  }
  return {picked.begin(), picked.end()};
}

}  // namespace partune::search
