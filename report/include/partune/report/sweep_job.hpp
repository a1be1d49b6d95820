#pragma once
// The job a sweep varies (search::SweepJob), loaded here at the edge: the job file (or
// the Python module's text) with the sweep's --set overrides, checked once (every key and
// value, and the job rules but those on the parallel layout: JobRules::settings); each
// point is the same file with its own keys set by costmodel's loader (load_job /
// parse_job with --set overrides); whether the file itself fixes parallel.microbatches,
// and whether it has a parallel: section.
#include <string>
#include <vector>

#include "partune/search/sweep.hpp"

namespace partune::report {

// `path`'s job; a bad job or --set throws its ScenarioError here.
search::SweepJob sweep_job_file(const std::string& path, const std::vector<std::string>& overrides);
// The same from YAML text; `origin` names it in errors and anchors its relative paths.
search::SweepJob sweep_job_text(const std::string& text, const std::string& origin,
                                const std::vector<std::string>& overrides);

}  // namespace partune::report
