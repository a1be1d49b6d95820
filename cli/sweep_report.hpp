#pragma once
// What `partune sweep` prints and writes: a table, CSV and JSON of the points, with the
// varied keys as the first columns. Only a point that fits has a throughput, a
// time-to-train and a cost; one that does not fit or is not a consistent job says why
// instead.
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
// The line under the table saying how the points' micro-batches were set.
std::string sweep_microbatch_note(const search::MicrobatchPolicy& policy);
std::string sweep_csv_header(const std::vector<search::SweepAxis>& axes);
// Numbers with every digit (shortest text that reads back as the same double).
std::string sweep_csv_row(const search::SweepPoint& p, const SweepBudget& budget);
// Every point has the same keys: status ("fits", "does not fit", "invalid"), ok (it
// fits), reason (null when it fits), estimate (null when invalid), the time and cost keys
// (null unless it fits and --tokens is given); values hold numbers and booleans as such.
nlohmann::json sweep_point_json(const std::vector<search::SweepAxis>& axes, const search::SweepPoint& p,
                                const SweepBudget& budget);
nlohmann::json sweep_json_of(const std::vector<search::SweepAxis>& axes, const search::MicrobatchPolicy& policy,
                             nlohmann::json points);

nlohmann::json sweep_json(const std::vector<search::SweepAxis>& axes, const search::MicrobatchPolicy& policy,
                          const std::vector<search::SweepPoint>& points, const SweepBudget& budget);

}  // namespace partune::cli
