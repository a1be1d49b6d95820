// reproduce --corpus: every row's error, then the corpus's summary by source, GPU generation
// and parallel kind (costmodel/corpus.hpp computes it; this file only prints).
#include <fmt/format.h>

#include "partune/costmodel/corpus.hpp"
#include "partune/report/report.hpp"

namespace partune::report {

namespace {

std::string summary_line(const std::string& label, const ErrorSummary& s) {
  return fmt::format("{:<30} {:>5} {:>7.1f}% {:>7.1f}% {:>+8.1f}% {:>6.0f}% {:>6.0f}% {:>6.0f}% {:>7}\n", label,
                     s.rows, s.mape_pct, s.median_abs_pct, s.mean_signed_pct, 100 * s.within10, 100 * s.within15,
                     100 * s.within20, s.not_fit);
}

std::string summary_block(const std::string& title, const std::vector<std::pair<std::string, ErrorSummary>>& groups) {
  std::string s = fmt::format("\n{:<30} {:>5} {:>8} {:>8} {:>9} {:>7} {:>7} {:>7} {:>7}\n", title, "rows", "MAPE",
                              "median", "signed", "<=10%", "<=15%", "<=20%", "no-fit");
  for (const auto& [label, summary] : groups) s += summary_line(label, summary);
  return s;
}

nlohmann::json summary_json(const ErrorSummary& s) {
  return {{"rows", s.rows},
          {"mape_pct", s.mape_pct},
          {"median_abs_pct", s.median_abs_pct},
          {"mean_signed_pct", s.mean_signed_pct},
          {"within_10pct", s.within10},
          {"within_15pct", s.within15},
          {"within_20pct", s.within20},
          {"predicted_not_to_fit", s.not_fit}};
}

nlohmann::json groups_json(const std::vector<std::pair<std::string, ErrorSummary>>& groups) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [label, summary] : groups) out[label] = summary_json(summary);
  return out;
}

std::string markdown_block(const std::string& title,
                           const std::vector<std::pair<std::string, ErrorSummary>>& groups) {
  std::string s = fmt::format("| {} | rows | MAPE | median | mean signed | within 10% | within 15% | within 20% | "
                              "predicted not to fit |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
                              title);
  for (const auto& [label, e] : groups)
    s += fmt::format("| {} | {} | {:.1f}% | {:.1f}% | {:+.1f}% | {:.0f}% | {:.0f}% | {:.0f}% | {} |\n", label, e.rows,
                     e.mape_pct, e.median_abs_pct, e.mean_signed_pct, 100 * e.within10, 100 * e.within15,
                     100 * e.within20, e.not_fit);
  return s + "\n";
}

}  // namespace

std::string corpus_markdown(const ReproduceResult& r) {
  const CorpusSummary c = summarize_corpus(r);
  return markdown_block("corpus", {{"all rows", c.all}}) + markdown_block("source", c.by_source) +
         markdown_block("GPU", c.by_gpu) + markdown_block("parallel kind", c.by_kind);
}

std::string corpus_text(const ReproduceResult& r) {
  std::string s = fmt::format("{:<26} {:<44} {:<6} {:<15} {:>12} {:>12} {:>8}\n", "source", "row", "gpu", "kind",
                              "published", "predicted", "error");
  for (const RowResult& row : r.rows)
    s += fmt::format("{:<26} {:<44} {:<6} {:<15} {:>12.2f} {:>12.2f} {:>+7.1f}%{}\n", row.table, row.row, row.gpu,
                     row.parallel_kind, row.published, row.predicted, row.error_pct,
                     row.fits ? "" : "  (predicted: does not fit)");
  const CorpusSummary c = summarize_corpus(r);
  s += summary_block("by source", c.by_source);
  s += summary_block("by GPU generation", c.by_gpu);
  s += summary_block("by parallel kind", c.by_kind);
  s += summary_block("corpus", {{"all rows", c.all}});
  return s;
}

nlohmann::json corpus_json(const ReproduceResult& r) {
  const CorpusSummary c = summarize_corpus(r);
  nlohmann::json out = reproduce_json(r);
  out["corpus"] = {{"all", summary_json(c.all)},
                   {"by_source", groups_json(c.by_source)},
                   {"by_gpu", groups_json(c.by_gpu)},
                   {"by_parallel_kind", groups_json(c.by_kind)}};
  return out;
}

}  // namespace partune::report
