#pragma once
// What `partune search` prints: a table of the top candidates and a summary of the
// winner (text), or one JSON object with every ranked candidate; the candidates the
// simulator ruled out; why candidates matching --explain filters were dropped; or, when
// the search has no answer, why. Each candidate's name is the search's (Candidate::
// configuration).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/training_cost.hpp"
#include "partune/search/tuner.hpp"

namespace partune::report {

// The winner's time-to-train and cost (--tokens, --price-per-node-hour) by the one rule of
// training_cost.hpp: tokens 0, no time-to-train line; on_demand_per_hour 0, no cost line
// (a search prices at a price it is given only, never at the instance type's).
TrainingCostOptions search_budget(double tokens, double price_per_node_hour);

std::string search_text(const Job& base, const search::SearchReport& r, const TrainingCostOptions& budget, int rows);
nlohmann::json search_json(const Job& base, const search::SearchReport& r, const TrainingCostOptions& budget);

// Why the search has no answer, as `partune search` prints it on standard error (no legal
// configuration in the space; or none fits, and why some were dropped); empty when it
// has one.
std::string search_failure(const Job& base, const search::SearchReport& r);

// How `partune search` prints a search that has an answer.
struct SearchPrint {
  TrainingCostOptions budget = search_budget(0, 0);
  int rows = 10;      // --show: rows of the text's table
  bool json = false;  // one JSON object instead of the text
};
// The report, the candidates the simulator ruled out, then (with `explain` filters, as
// --explain) why the pruned candidates matching them were dropped. `execution` (null:
// none) is the --execute run's object, and `execution_text` its text.
std::string search_output(const Job& base, const search::SearchReport& r, const SearchPrint& print,
                          const std::vector<std::string>& explain, const nlohmann::json& execution,
                          const std::string& execution_text);

}  // namespace partune::report
