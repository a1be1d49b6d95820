#pragma once
// The corpus of published runs (scenarios/corpus/): how far predictions are from them,
// summarised over every row and per source, GPU generation and parallel kind
// (`partune reproduce --corpus`, docs/validation.md §0).
#include <string>
#include <utility>
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/table.hpp"

namespace partune {

// The GPU generation of a job's instance type: its GPU's name up to the first '-'
// ("A100-SXM4-40GB" -> "A100", "GB200-186GB" -> "GB200").
std::string gpu_generation(const Job& job);

// What kind of parallelism a run leans on, the first that applies in this order: a mixture
// of experts, context parallelism, sharded data parallelism (ZeRO-3 / FSDP), tensor or
// pipeline parallelism, plain data parallelism (ZeRO-1/2 included).
enum class ParallelKind { moe, context, sharded_data, tensor_pipeline, data };
ParallelKind parallel_kind(const Job& job);
const char* to_string(ParallelKind k);

// Errors of a set of rows, in percent of the published value.
struct ErrorSummary {
  int rows = 0;
  double mape_pct = 0;         // mean |error|
  double median_abs_pct = 0;   // median |error|
  double mean_signed_pct = 0;  // mean error: > 0 predicts too fast on average
  double within10 = 0, within15 = 0, within20 = 0;  // shares of rows within +-10/15/20%
  int not_fit = 0;             // rows predicted not to fit in memory (all of them ran)
};
ErrorSummary summarize_errors(const std::vector<RowResult>& rows);

struct CorpusSummary {
  ErrorSummary all;
  // Each in the order of first appearance (tables sorted by file name).
  std::vector<std::pair<std::string, ErrorSummary>> by_source, by_gpu, by_kind;
};
CorpusSummary summarize_corpus(const ReproduceResult& r);

}  // namespace partune
