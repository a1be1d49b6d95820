#pragma once
// `partune search --execute K` at the edge: the progress bar over the backend runs
// (validate/candidate_execution.hpp does them) and the execution as the --json object
// and the text made from it.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "partune/search/tuner.hpp"
#include "partune/validate/candidate_execution.hpp"

namespace partune::cli {

struct ExecuteOptions {
  int candidates = 0;  // K
  int repeats = 2, steps = 6, warmup = 2;
  bool progress = false;
};

// --execute, --execute-repeats, --execute-steps.
void add_execute_options(CLI::App* cmd, ExecuteOptions* opt);

// Every executed candidate (predicted and measured, or why it failed) and the ranking's
// agreement. Throws std::runtime_error when fewer than two candidates ran.
nlohmann::json execute_candidates(const search::SearchReport& report, const ExecuteOptions& opt);

// The same in two steps: the runs' options (with the progress bar when asked), and the
// --json object of what they measured.
validate::ExecutionOptions execution_options(const ExecuteOptions& opt);
nlohmann::json execution_json(const validate::Execution& x);

std::string execution_text(const nlohmann::json& execution);

}  // namespace partune::cli
