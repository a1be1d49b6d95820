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

namespace partune::report {

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

// One MPI rank's points, each as its table line, CSV row and JSON object, in one text
// (under MPI every rank renders its own share; rank 0 puts them together).
std::string sweep_share(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                        const SweepBudget& budget, bool searched);

// Everything `partune sweep` prints or writes: the table with the micro-batch note under
// it, the CSV and the JSON object, put together from every rank's share in point order.
struct SweepOutput {
  std::string text, csv;
  nlohmann::json json;
};
// Throws a ScenarioError naming `origin` with the first point's reason when no point could
// be loaded (a mistake in the input, not a what-if: each rank judged only its share).
SweepOutput sweep_output(const std::string& origin, const std::vector<search::SweepAxis>& axes,
                         const search::MicrobatchPolicy& policy, const SweepBudget& budget, bool searched,
                         const std::vector<std::string>& shares);

}  // namespace partune::report
