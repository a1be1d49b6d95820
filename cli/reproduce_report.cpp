#include "reproduce_report.hpp"

#include <fmt/format.h>

#include <cmath>

namespace partune::cli {

namespace {

// One table cell: no line breaks, no unescaped column separators.
std::string cell(const std::string& text) {
  std::string out;
  bool space = false;
  for (char c : text) {
    if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

// Large values (tokens/s) without decimals; the rest with two.
std::string value(double v) { return std::fabs(v) >= 1000 ? fmt::format("{:.0f}", v) : fmt::format("{:.2f}", v); }

std::string why(const RowResult& row) {
  std::string s;
  if (!row.direction_ok)
    s = row.before.empty() ? "direction wrong. " : fmt::format("direction wrong against {}. ", row.before);
  if (!row.fits) s += "predicted not to fit. ";
  if (std::fabs(row.error_pct) > kWhyThresholdPct)
    s += row.known_gap.empty() ? "no `known_gap` recorded in the table file" : row.known_gap;
  return cell(s);
}

}  // namespace

std::string reproduce_markdown(const ReproduceResult& r, const std::string& evaluator) {
  std::string s = fmt::format(
      "| table | row | metric | published | predicted ({}) | error | why, where off by more than {:.0f}% |\n"
      "|---|---|---|---:|---:|---:|---|\n",
      evaluator, kWhyThresholdPct);
  for (const RowResult& row : r.rows)
    s += fmt::format("| {} | {} | {} | {} | {} | {:+.1f}% | {} |\n", cell(row.table), cell(row.row),
                     to_string(row.metric), value(row.published), value(row.predicted), row.error_pct, why(row));
  s += "\n";
  s += fmt::format("MAPE over all {} rows: {:.1f}%; over the {} TFLOPs rows: {:.1f}%; before/after and speedup "
                   "directions right: {} of {}.\n\n",
                   r.rows.size(), r.mape_pct, r.tflops_rows, r.mape_tflops_pct, r.pairs_right, r.pairs);
  s += "| table | rows | MAPE |\n|---|---:|---:|\n";
  for (const TableSummary& t : r.tables) s += fmt::format("| {} | {} | {:.1f}% |\n", cell(t.table), t.rows, t.mape_pct);
  return s;
}

}  // namespace partune::cli
