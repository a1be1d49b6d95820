#pragma once
// What `partune sweep` prints and writes: a table, CSV and JSON of the points, with the
// varied keys as the first columns.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partune/costmodel/training_cost.hpp"
#include "partune/search/sweep.hpp"

namespace partune::cli {

// Time-to-train and cost columns (sweep --tokens and the price options); tokens 0: none.
using SweepBudget = TrainingCostOptions;

std::string sweep_text(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                       const SweepBudget& budget, bool searched);
std::string sweep_csv(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                      const SweepBudget& budget);
nlohmann::json sweep_json(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                          const SweepBudget& budget);

}  // namespace partune::cli
