#pragma once
// What `partune sweep` prints and writes: a table, CSV and JSON of the points, with the
// varied keys as the first columns.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partune/search/sweep.hpp"

namespace partune::cli {

// Time-to-train and cost columns (sweep --tokens, --price-per-node-hour).
struct SweepBudget {
  double tokens = 0;               // 0: no time-to-train
  double price_per_node_hour = 0;  // 0: no cost
};

std::string sweep_text(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                       const SweepBudget& budget, bool searched);
std::string sweep_csv(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                      const SweepBudget& budget);
nlohmann::json sweep_json(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                          const SweepBudget& budget);

}  // namespace partune::cli
