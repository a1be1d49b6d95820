#pragma once
// Presentation of `partune validate`: each job's comparison (sim/validation.hpp) as the
// --json object, the text made from that object, and the suite's summary. No
// computation happens here.
#include <string>

#include <nlohmann/json.hpp>

#include "partune/costmodel/job.hpp"
#include "partune/sim/validation.hpp"

namespace partune::cli {

// "tp2 pp2 1f1b dp1 ...": the knobs that decide the programs.
std::string layout(const Job& job);

// What names a validated job in the report.
struct ValidatedJob {
  std::string name, file;
  std::string model;          // the model the backend ran, described
  int threads_per_rank = 0;
};
// `ran`: the job as the backend ran it.
nlohmann::json comparison_json(const ValidatedJob& v, const Job& ran, const sim::Comparison& c);
nlohmann::json failure_json(const std::string& name, const std::string& file, const std::string& error);
nlohmann::json summary_json(const sim::SuiteSummary& s);

// The suite's targets, as the summary prints them.
struct ValidationTargets {
  double median_step_error_pct = 10, worst_step_error_pct = 25, median_memory_error_pct = 10;
};
// The targets the suite missed ("median |step error| 12.3% > 10%; ..."), or "" when it
// met them all. A suite where no job ran misses them.
std::string missed_targets(const sim::SuiteSummary& s, const ValidationTargets& t = {});

std::string job_text(const nlohmann::json& r);
std::string summary_text(const nlohmann::json& results, const nlohmann::json& summary);

}  // namespace partune::cli
