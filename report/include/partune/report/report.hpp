#pragma once
// Presentation of results: readable text and JSON. No computation happens here.
#include <nlohmann/json.hpp>
#include <string>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/table.hpp"
#include "partune/search/published.hpp"
#include "partune/sim/simulator.hpp"

namespace partune::report {

std::string describe_job(const Job& job);
// The headroom is HBM less the memory breakdown's total.
std::string estimate_text(const Job& job, const StepMetrics& e);
nlohmann::json estimate_json(const Job& job, const StepMetrics& e);
// What failures cost the run (goodput.hpp): the job's failure rate, its checkpoint, the
// Young/Daly interval and the goodput; with `tokens` > 0 the time-to-train without and
// with failures. estimate prints it after its report; the JSON is its "resilience" object.
std::string resilience_text(const Job& job, const StepMetrics& e, double tokens = 0);
nlohmann::json resilience_json(const Job& job, const StepMetrics& e, double tokens = 0);

// simulate: the estimate's report and keys, plus what only the simulation shows.
// `analytic` is the estimator's view of the same job: the report puts the two side by
// side and says where they differ.
std::string simulation_text(const Job& job, const sim::SimResult& r, const Estimate& analytic);
// What simulation_text's figures mean where two look alike (the two bubbles, the exposed
// communication by kind), for `simulate --help`.
const char* simulation_terms();
nlohmann::json simulation_json(const Job& job, const sim::SimResult& r, const Estimate& analytic);

// reproduce --search: published configurations against the ones the search finds.
std::string published_comparison_text(const std::vector<search::PublishedComparison>& rows);
nlohmann::json published_comparison_json(const std::vector<search::PublishedComparison>& rows);

std::string reproduce_text(const ReproduceResult& r);
nlohmann::json reproduce_json(const ReproduceResult& r);
// reproduce --corpus: the rows with their GPU generation and parallel kind, then the error
// summary over the corpus and per source, GPU generation and parallel kind (corpus.hpp).
std::string corpus_text(const ReproduceResult& r);
nlohmann::json corpus_json(const ReproduceResult& r);
// The summary alone as Markdown tables (docs/validation.md section 0).
std::string corpus_markdown(const ReproduceResult& r);

}  // namespace partune::report
