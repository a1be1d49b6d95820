#include "partune/report/collective_report.hpp"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

namespace partune::report {

namespace {

// 8 B, 32 KiB, 1 GiB, 16 GiB: sizes are powers of two in these tables.
std::string size_text(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) bytes /= 1024, ++u;
  return fmt::format("{:g} {}", bytes, units[u]);
}

std::string time_text(double seconds) {
  const double us = seconds * 1e6;
  return us < 1000 ? fmt::format("{:.1f} us", us) : fmt::format("{:.0f} us", us);
}

// The measured busbw of a point, GB/s (nccl-tests' rule), from its time.
double busbw(const PointComparison& p, double seconds) {
  return p.bytes / seconds * busbw_factor(p.kind, p.nodes * p.gpus_per_node) / 1e9;
}

std::string errors_text(const CollectiveErrors& e) {
  if (e.points == 0)
    return fmt::format("{:>6} {:>12} {:>9} {:>9} {:>9}  {:>8} {:>8}", 0, "-", "-", "-", "-", e.outliers, e.harness_apart);
  return fmt::format("{:>6} {:>11.1f}% {:>+8.1f}% {:>4}/{:<4} {:>4}/{:<4}  {:>8} {:>8}", e.points, e.median_abs_pct,
                     e.worst_pct, e.within15, e.points, e.within50, e.points, e.outliers, e.harness_apart);
}

std::string series_label(const PointComparison& p) {
  if (p.outlier) return "[outlier] ";
  if (p.harness != MeasurementHarness::nccl_tests) return fmt::format("[harness {}] ", to_string(p.harness));
  return "";
}

void file_text(const FileComparison& f, std::string& out) {
  out += fmt::format("\n{}  ({}; {})\n  source: {}\n", std::filesystem::path(f.path).filename().string(), f.instance,
                     f.fabric, f.source);
  std::string series;
  for (const PointComparison& p : f.points) {
    if (p.series != series) {
      series = p.series;
      out += fmt::format("  {}{}: {}, NCCL {}, priced as {}\n", series_label(p), series,
                         to_string(p.kind), to_string(p.measured_algorithm), to_string(p.algorithm));
      out += fmt::format("    {:>9} {:>7} {:>14} {:>13} {:>14} {:>13} {:>8}\n", "size", "nodes", "measured",
                         "busbw GB/s", "predicted", "busbw GB/s", "error");
    }
    out += fmt::format("    {:>9} {:>7} {:>13}{} {:>13.2f} {:>14} {:>13.2f} {:>+7.1f}%\n", size_text(p.bytes),
                       fmt::format("{}x{}", p.nodes, p.gpus_per_node), time_text(p.measured_s), p.derived ? "*" : " ",
                       busbw(p, p.measured_s), time_text(p.predicted_s), busbw(p, p.predicted_s), p.error_pct);
  }
  const CollectiveErrors& e = f.errors;
  out += fmt::format("  errors: {} points, median |error| {:.1f}%, worst {:+.1f}%, {} within 15%, {} within 50%, {} outlier "
                     "points apart",
                     e.points, e.median_abs_pct, e.worst_pct, e.within15, e.within50, e.outliers);
  if (e.harness_apart > 0)
    out += fmt::format(", {} points of another harness apart (median |error| {:.1f}%, worst {:+.1f}%)", e.harness_apart,
                       e.harness_median_abs_pct, e.harness_worst_pct);
  out += "\n";
}

nlohmann::json errors_json(const CollectiveErrors& e) {
  return {{"points", e.points},       {"median_abs_error_pct", e.median_abs_pct}, {"worst_error_pct", e.worst_pct},
          {"within_15pct", e.within15}, {"within_50pct", e.within50},            {"outliers", e.outliers},
          {"harness_apart", e.harness_apart}, {"harness_median_abs_error_pct", e.harness_median_abs_pct},
          {"harness_worst_error_pct", e.harness_worst_pct}};
}

}  // namespace

std::string collective_comparison_text(const CollectiveComparison& c) {
  std::string out = fmt::format(
      "bench collectives --compare: {} files; error = (predicted - measured) / measured time, < 0: the model is "
      "faster; * a time derived from the printed bandwidth or range (README.md)\n",
      c.files.size());
  for (const FileComparison& f : c.files) file_text(f, out);
  out += fmt::format(
      "\nper fabric (outlier series and series timed by another harness left out):\n  {:<46} {:>6} {:>12} {:>9} {:>9} "
      "{:>9}  {:>8} {:>8}\n",
      "fabric", "points", "median |err|", "worst", "<=15%", "<=50%", "outliers", "harness");
  for (const FabricComparison& f : c.fabrics) out += fmt::format("  {:<46} {}\n", f.fabric, errors_text(f.errors));
  out += fmt::format("  {:<46} {}\n", "all", errors_text(c.all));
  if (c.all.harness_apart > 0)
    out += fmt::format(
        "  points timed by another harness (measurements/collectives/README.md): {}, median |error| {:.1f}%, worst "
        "{:+.1f}%\n",
        c.all.harness_apart, c.all.harness_median_abs_pct, c.all.harness_worst_pct);
  return out;
}

nlohmann::json collective_comparison_json(const CollectiveComparison& c) {
  nlohmann::json files = nlohmann::json::array();
  for (const FileComparison& f : c.files) {
    nlohmann::json points = nlohmann::json::array();
    for (const PointComparison& p : f.points)
      points.push_back({{"series", p.series},
                        {"fabric", p.fabric},
                        {"collective", to_string(p.kind)},
                        {"nccl_algorithm", to_string(p.measured_algorithm)},
                        {"modelled_algorithm", to_string(p.algorithm)},
                        {"nodes", p.nodes},
                        {"gpus_per_node", p.gpus_per_node},
                        {"bytes", p.bytes},
                        {"measured_us", p.measured_s * 1e6},
                        {"measured_from", p.measured_from},
                        {"derived", p.derived},
                        {"predicted_us", p.predicted_s * 1e6},
                        {"error_pct", p.error_pct},
                        {"outlier", p.outlier},
                        {"harness", to_string(p.harness)}});
    files.push_back({{"path", f.path},
                     {"source", f.source},
                     {"fabric", f.fabric},
                     {"instance_type", f.instance},
                     {"points", points},
                     {"errors", errors_json(f.errors)}});
  }
  nlohmann::json fabrics = nlohmann::json::array();
  for (const FabricComparison& f : c.fabrics) fabrics.push_back({{"fabric", f.fabric}, {"errors", errors_json(f.errors)}});
  return {{"files", files}, {"fabrics", fabrics}, {"all", errors_json(c.all)}};
}

}  // namespace partune::report
