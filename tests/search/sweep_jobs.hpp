#pragma once
// A sweep's job for the tests of search/sweep.hpp, loaded as partune sweep loads it
// (cli/sweep_job.cpp): costmodel's loader over a file or text, with --set overrides.
// Whether the file fixes its micro-batches is the test's to say (the YAML is read in cli/);
// whether it gives a layout, a parallel: section, is read here from its text.
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "partune/costmodel/scenario.hpp"
#include "partune/search/sweep.hpp"

// In partune::testing with the other shared test helpers (tests/support): one `testing`
// namespace, so a unit using both partune and partune::search names it unambiguously.
namespace partune::testing {

using search::SweepJob;

inline SweepJob file_sweep_job(const std::string& path, bool file_sets_microbatches,
                               const std::vector<std::string>& overrides = {}) {
  SweepJob job;
  job.base = load_job(path, overrides, JobRules::settings);
  job.origin = path;
  job.file_sets_microbatches = file_sets_microbatches;
  std::ifstream in(path);
  job.file_gives_layout = std::string(std::istreambuf_iterator<char>(in), {}).find("\nparallel:") != std::string::npos;
  job.load = [path](const std::vector<std::string>& o, JobRules rules) { return load_job(path, o, rules); };
  return job;
}

inline SweepJob text_sweep_job(const std::string& text, const std::string& origin, bool file_sets_microbatches,
                               const std::vector<std::string>& overrides = {}) {
  SweepJob job;
  job.base = parse_job(text, origin, overrides, JobRules::settings);
  job.origin = origin;
  job.file_sets_microbatches = file_sets_microbatches;
  job.file_gives_layout = text.find("parallel:") != std::string::npos;
  job.load = [text, origin](const std::vector<std::string>& o, JobRules rules) {
    return parse_job(text, origin, o, rules);
  };
  return job;
}

}  // namespace partune::testing
