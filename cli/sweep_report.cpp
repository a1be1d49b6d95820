// The sweep's table, CSV and JSON (sweep_report.hpp).
#include "sweep_report.hpp"

#include <fmt/format.h>

#include <limits>

#include "partune/costmodel/units.hpp"
#include "report.hpp"

namespace partune::cli {

namespace {

TrainingCost budgeted(const search::SweepPoint& p, const SweepBudget& b) {
  return p.ok ? training_cost(p.job, p.metrics.step_time, b) : TrainingCost{};
}

// "3.2 days", "5.0 hours", "12.0 minutes".
std::string duration(double s) {
  if (s == std::numeric_limits<double>::infinity()) return "never";
  if (s >= 86400) return fmt::format("{:.1f} days", s / 86400);
  if (s >= 3600) return fmt::format("{:.1f} hours", s / 3600);
  return fmt::format("{:.1f} minutes", s / 60);
}

// A CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::string sweep_text_header(const std::vector<search::SweepAxis>& axes, const SweepBudget& budget, bool searched) {
  std::string head;
  for (const auto& a : axes) head += fmt::format("{:>16} ", a.key);
  head += fmt::format("{:>10} {:>10} {:>7} {:>6} {:>9} {:>4}", "samples/s", "tokens/s", "TFLOPs", "MFU", "memory", "fit");
  if (budget.tokens > 0) head += fmt::format(" {:>11} {:>11} {:>11} {:>11}", "train", "cost", "spot train", "spot cost");
  if (searched) head += "  configuration";
  return head + "\n";
}

std::string sweep_text_row(const search::SweepPoint& p, const SweepBudget& budget, bool searched) {
  std::string s;
  for (const auto& v : p.values) s += fmt::format("{:>16} ", v);
  if (!p.ok) return s + p.error + "\n";
  const Estimate& e = p.metrics;
  s += fmt::format("{:>10.2f} {:>10.0f} {:>7.1f} {:>5.1f}% {:>5.1f} GiB {:>4}", e.samples_per_s, e.tokens_per_s,
                   e.tflops_per_gpu, 100 * e.mfu, e.memory.total() / units::GiB, e.fits ? "yes" : "no");
  const TrainingCost b = budgeted(p, budget);
  auto usd = [](double x) { return x > 0 ? fmt::format("${:.0f}", x) : std::string("-"); };
  if (budget.tokens > 0)
    s += fmt::format(" {:>11} {:>11} {:>11} {:>11}", duration(b.seconds), usd(b.on_demand_usd),
                     b.has_spot ? duration(b.spot_seconds) : "-", b.has_spot ? usd(b.spot_usd) : "-");
  if (searched) s += "  " + search::describe(p.job);
  return s + "\n";
}

std::string sweep_text(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                       const SweepBudget& budget, bool searched) {
  std::string s = sweep_text_header(axes, budget, searched);
  for (const auto& p : points) s += sweep_text_row(p, budget, searched);
  return s;
}

std::string sweep_csv_header(const std::vector<search::SweepAxis>& axes) {
  std::string s;
  for (const auto& a : axes) s += csv_field(a.key) + ",";
  return s + "samples_per_s,tokens_per_s,tflops_per_gpu,mfu,peak_memory_bytes,fits,configuration,time_to_train_s,"
             "cost_on_demand,spot_time_to_train_s,cost_spot,error\n";
}

std::string sweep_csv_row(const search::SweepPoint& p, const SweepBudget& budget) {
  std::string s;
  for (const auto& v : p.values) s += csv_field(v) + ",";
  if (!p.ok) return s + ",,,,,,,,,,," + csv_field(p.error) + "\n";
  const Estimate& e = p.metrics;
  const TrainingCost b = budgeted(p, budget);
  auto num = [](bool shown, double x) { return shown ? fmt::format("{:.6g}", x) : std::string(); };
  const bool train = budget.tokens > 0;
  return s + fmt::format("{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{},{},{},{},{},{},\n", e.samples_per_s, e.tokens_per_s,
                         e.tflops_per_gpu, e.mfu, e.memory.total(), e.fits ? "true" : "false",
                         csv_field(search::describe(p.job)), num(train, b.seconds),
                         num(train && b.on_demand_usd > 0, b.on_demand_usd), num(train && b.has_spot, b.spot_seconds),
                         num(train && b.has_spot, b.spot_usd));
}

std::string sweep_csv(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                      const SweepBudget& budget) {
  std::string s = sweep_csv_header(axes);
  for (const auto& p : points) s += sweep_csv_row(p, budget);
  return s;
}

nlohmann::json sweep_point_json(const std::vector<search::SweepAxis>& axes, const search::SweepPoint& p,
                                const SweepBudget& budget) {
  nlohmann::json point = {{"index", p.index}, {"ok", p.ok}};
  for (std::size_t a = 0; a < axes.size(); ++a) point["values"][axes[a].key] = p.values[a];
  if (!p.ok) {
    point["error"] = p.error;
    return point;
  }
  point["estimate"] = estimate_json(p.job, p.metrics);  // the keys of estimate --json
  point["configuration"] = search::describe(p.job);
  point["simulated"] = p.simulated;
  const TrainingCost b = budgeted(p, budget);
  if (budget.tokens > 0) {
    point["time_to_train_s"] = b.seconds;
    if (b.on_demand_usd > 0) point["cost_on_demand"] = b.on_demand_usd;
    if (b.has_spot) {
      point["spot_interruptions_per_hour"] = b.spot_interruptions_per_hour;
      point["spot_time_to_train_s"] = b.spot_seconds;  // infinity: never ends (null in JSON)
      point["cost_spot"] = b.spot_usd;
    }
  }
  return point;
}

nlohmann::json sweep_json_of(const std::vector<search::SweepAxis>& axes, nlohmann::json points) {
  nlohmann::json j;
  j["axes"] = nlohmann::json::array();
  for (const auto& a : axes) j["axes"].push_back({{"key", a.key}, {"values", a.values}});
  j["points"] = std::move(points);
  return j;
}

nlohmann::json sweep_json(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                          const SweepBudget& budget) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : points) list.push_back(sweep_point_json(axes, p, budget));
  return sweep_json_of(axes, std::move(list));
}

}  // namespace partune::cli
