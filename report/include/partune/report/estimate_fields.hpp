#pragma once
// The numbers of a StepMetrics (costmodel/estimator.hpp: the estimator's Estimate or a
// simulation's figures) as the reports name them, one table each for the headline figures,
// the step breakdown and the memory breakdown. A
// row gives the key of `estimate --json` (the Python module's dict is that object too),
// the text report's label where the text lists the number in a section, and how to read
// it. estimate_json and the text's breakdown and memory sections iterate these tables: a
// new number is one row here. (The text's headline lines keep their own layout.)
#include <vector>

#include "partune/costmodel/estimator.hpp"

namespace partune::report {

// A headline figure: a key of the top level of `estimate --json`.
struct EstimateField {
  const char* key;  // "step_time_s"
  double (*value)(const StepMetrics&);
};
const std::vector<EstimateField>& estimate_fields();

// A number of the step (StepBreakdown), under "breakdown". A part of the step (one with a
// label) goes under "breakdown.exposed_s": the parts add up to the step time (the sum
// rule, step_sum_rule()); the others are totals, under "breakdown.totals_s" (a kind's
// whole busy time, hidden in part; recompute, a part of compute). In the text, a part is
// a row of the "step time breakdown" with its share of the step, and maybe a note after
// it naming a total: "incl. recompute 1.2 s", "of 3.4 s total".
struct StepField {
  const char* key;               // "compute": its key under exposed_s or totals_s
  double StepBreakdown::*value;
  const char* label;             // the text's row, and a part of the step; nullptr: a total
  bool row_when_zero;            // the text shows the row at 0
  double StepBreakdown::*note;   // nullptr: no note; shown when above 0
  const char* note_format;       // "  incl. recompute {}": the note's value in seconds
};
const std::vector<StepField>& step_fields();
// The sentence "breakdown.sum_rule" gives: how the parts and the totals relate to the step.
const char* step_sum_rule();

// A part of the memory of the largest stage (MemoryBreakdown), under "memory". In the
// text, where its row goes in the "memory per GPU" section.
enum class MemoryRow {
  part,     // a part of the total, shown when above 0
  overlap,  // subtracted from the parts (not live together), shown when above 0; not in the JSON
  total,    // the sum, with the GPU's HBM beside it
  host,     // after the total: bytes on the host, shown when above 0
};
struct MemoryField {
  const char* key;  // "parameters_bytes"; nullptr: the text's alone
  double (*value)(const MemoryBreakdown&);
  const char* label;
  MemoryRow row;
};
const std::vector<MemoryField>& memory_fields();

}  // namespace partune::report
