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

// One point's line, row or object; the headers; the JSON around the points' objects
// (what each MPI rank renders of its points, and rank 0 puts together).
std::string sweep_text_header(const std::vector<search::SweepAxis>& axes, const SweepBudget& budget, bool searched);
std::string sweep_text_row(const search::SweepPoint& p, const SweepBudget& budget, bool searched);
std::string sweep_csv_header(const std::vector<search::SweepAxis>& axes);
std::string sweep_csv_row(const search::SweepPoint& p, const SweepBudget& budget);
nlohmann::json sweep_point_json(const std::vector<search::SweepAxis>& axes, const search::SweepPoint& p,
                                const SweepBudget& budget);
nlohmann::json sweep_json_of(const std::vector<search::SweepAxis>& axes, nlohmann::json points);

std::string sweep_text(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                       const SweepBudget& budget, bool searched);
std::string sweep_csv(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                      const SweepBudget& budget);
nlohmann::json sweep_json(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                          const SweepBudget& budget);

}  // namespace partune::cli
