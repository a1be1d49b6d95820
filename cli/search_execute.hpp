#pragma once
// `partune search --execute K`: run the top K candidates of a search and K drawn from the
// rest of the ranked list (search/execution_sample.hpp) on the LibTorch backend,
// repeated and interleaved (A B C A B C), and compare the measured ranking with the
// predicted one (sim/ranking.hpp). The backend is a separate process (backend_run.hpp).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partune/search/tuner.hpp"

namespace partune::cli {

struct ExecuteOptions {
  int candidates = 0;  // K
  int repeats = 2, steps = 6, warmup = 2;
  bool progress = false;
};

// Every executed candidate (predicted and measured, or why it failed) and the ranking's
// agreement. Throws std::runtime_error when fewer than two candidates ran.
nlohmann::json execute_candidates(const search::SearchReport& report, const ExecuteOptions& opt);

std::string execution_text(const nlohmann::json& execution);

// `partune search JOB --execute K` with the search's defaults (cmd_search.cpp): prints the
// search report and the execution, returns the execution's JSON.
nlohmann::json search_and_execute(const std::string& job, const std::vector<std::string>& overrides,
                                  const ExecuteOptions& execute, bool json);

// The ranking targets of a validation (issue 14): Kendall's tau >= 0.8 and the predicted
// best within 5% of the measured best. Empty when met, else what was missed.
std::string missed_ranking_targets(const nlohmann::json& execution);

}  // namespace partune::cli
