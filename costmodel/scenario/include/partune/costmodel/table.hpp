#pragma once
// Published tables: each row a job with the value someone measured, and the comparison
// of predictions against them (`partune reproduce`).
#include <functional>
#include <string>
#include <vector>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/job.hpp"

namespace partune {

// What a row's published number measures.
enum class Metric { hw_tflops_per_gpu, tflops_per_gpu, samples_per_s, tokens_per_s, speedup };
const char* to_string(Metric m);
const char* unit_of(Metric m);

struct TableRow {
  std::string name;
  Metric metric = Metric::hw_tflops_per_gpu;
  double published = 0;
  Job job;
  bool has_baseline = false;  // metric == speedup: job's samples/s over baseline's
  Job baseline;
  std::string before;         // name of this row's "before" row (direction check)
  std::string note;
  std::string known_gap;      // why the prediction is known to be far off (a mechanism, or
                              // "not explained yet" and the issue that addresses it)
  // Corpus rows (scenarios/corpus/README.md): where the figure is, the software it ran on
  // and what the publication leaves unstated. Free text for people; nothing reads it.
  std::string source, stack, assumptions;
};

struct Table {
  std::string name;
  std::string source;
  std::string file;
  std::vector<TableRow> rows;
};

// Loads a table file, or every *.yaml in a folder (sorted, so output is deterministic).
std::vector<Table> load_tables(const std::vector<std::string>& paths);

struct RowResult {
  std::string table, row;
  Metric metric;
  double published = 0, predicted = 0, error_pct = 0;  // (predicted - published) / published
  std::string before;   // pair partner, if any
  bool direction_ok = true;  // sign of (row - before) agrees between prediction and paper
  bool fits = true;
  std::string known_gap;  // the row's `known_gap`, as written in the table file
  std::string gpu;            // the GPU generation the row runs on (gpu_generation)
  std::string parallel_kind;  // its parallel kind (parallel_kind)
};

struct TableSummary {
  std::string table;
  int rows = 0;
  double mape_pct = 0;  // over this table's rows
};

struct ReproduceResult {
  std::vector<RowResult> rows;
  double mape_pct = 0;            // over every row
  double mape_tflops_pct = 0;     // over TFLOPs rows only
  int pairs = 0, pairs_right = 0; // before/after direction checks
  int tflops_rows = 0;            // rows behind mape_tflops_pct
  std::vector<TableSummary> tables;  // one per table, in input order
};

// `evaluate` predicts one job: the estimator's figures or a simulation's.
using JobEvaluator = std::function<StepMetrics(const Job&)>;
ReproduceResult reproduce(const std::vector<Table>& tables, const JobEvaluator& evaluate);

}  // namespace partune
