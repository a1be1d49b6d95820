#pragma once
// `partune validate --search JOB`: the search's ranking against the backend's. The job
// searched with the search's defaults, its top K candidates and K from the rest run on
// the backend (as `partune search JOB --execute K`, and printed alike), and the ranking
// judged on validate/targets.hpp's ranking targets.
#include <string>
#include <vector>

#include "search_execute.hpp"

namespace partune::cli {

// Exit 3 when the search has no answer, 1 when fewer than two candidates ran or the
// ranking missed a target.
void validate_search(const std::string& job, const std::vector<std::string>& overrides, const ExecuteOptions& execute,
                     bool json);

}  // namespace partune::cli
