// `partune validate --search` (validate_search.hpp).
#include "validate_search.hpp"

#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "commands.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/search/request.hpp"
#include "partune/validate/targets.hpp"
#include "progress.hpp"
#include "partune/report/search_report.hpp"

namespace partune::cli {

void validate_search(const std::string& job, const std::vector<std::string>& overrides, const ExecuteOptions& execute,
                     bool json) {
  const Job base = load_job(job, overrides, JobRules::settings);  // its layout: where the search starts
  search::SearchRequest request;  // the search's defaults
  const bool terminal = ::isatty(STDERR_FILENO) && !json;
  if (terminal) request.options.progress = progress_bar;
  const search::SearchReport report = search::run_search(base, job, request);
  if (terminal) std::fprintf(stderr, "\r%80s\r", "");
  if (const std::string why = report::search_failure(base, report); !why.empty()) {
    std::cerr << why;
    throw Exit{3};
  }
  ExecuteOptions eo = execute;
  eo.progress = ::isatty(STDERR_FILENO) != 0;
  validate::Execution x;
  try {
    x = validate::execute_candidates(report, execution_options(eo));
  } catch (const std::runtime_error& e) {
    std::cerr << "partune: error: " << job << ": " << e.what() << "\n";
    throw Exit{1};
  }
  const nlohmann::json execution = execution_json(x);
  std::cout << report::search_output(base, report, report::SearchPrint{{}, 10, json}, {}, execution, execution_text(execution));
  const std::string missed = validate::missed_ranking_targets(x.agreement);
  if (missed.empty()) return;
  std::cerr << "partune: validate: missed the targets: " << missed << "\n";
  throw Exit{1};
}

}  // namespace partune::cli
