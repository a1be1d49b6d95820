#pragma once
// Presentation of `partune validate`: each job's comparison (validate/validation.hpp) as
// the --json object, the text made from that object, and the suite's summary. No
// computation happens here.
#include <string>

#include <nlohmann/json.hpp>

#include "partune/costmodel/job.hpp"
#include "partune/validate/validation.hpp"
#include "partune/validate/validation_suite.hpp"

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
nlohmann::json comparison_json(const ValidatedJob& v, const Job& ran, const validate::Comparison& c);
// A job's result object: its comparison, or why it failed, and whether it was
// oversubscribed; with `trace_dir`, its
// predicted and measured Chrome traces written there (DIR/<job>-predicted.json and
// -measured.json, the median timed step) and named.
nlohmann::json job_result(const validate::SuiteJob& c, const validate::JobValidation& j, const std::string& trace_dir);
nlohmann::json failure_json(const std::string& name, const std::string& file, const std::string& error);
nlohmann::json summary_json(const validate::SuiteSummary& s);

std::string job_text(const nlohmann::json& r);
std::string summary_text(const nlohmann::json& results, const nlohmann::json& summary);

}  // namespace partune::cli
