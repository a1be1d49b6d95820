// The sweep's table, CSV and JSON (sweep_report.hpp).
#include "partune/report/sweep_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/units.hpp"
#include "partune/report/report.hpp"
#include "partune/report/report_units.hpp"

namespace partune::report {

namespace {

using search::PointStatus;

bool fits(const search::SweepPoint& p) { return p.status == PointStatus::fits; }

// Only a point that fits costs anything.
TrainingCost budgeted(const search::SweepPoint& p, const SweepBudget& b) {
  return fits(p) ? training_cost(p.job, p.metrics.step_time, b) : TrainingCost{};
}

// "does not fit: stage 0 needs ...", "invalid: training.global_batch: ...".
std::string why_not(const search::SweepPoint& p) { return std::string(to_string(p.status)) + ": " + p.reason; }

// "48 x 4": micro-batches per pipeline pass x sequences in each.
std::string microbatches(const Job& job) {
  return fmt::format("{} x {}", job.parallel.microbatches, job.microbatch_size());
}

// A CSV field: quoted when it holds a comma, a quote or a line break.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// A CSV number with every digit (fmt's shortest round-trip form); empty when not shown.
std::string csv_number(bool shown, double x) { return shown ? fmt::format("{}", x) : std::string(); }

// A value as --set wrote it, typed as YAML reads a scalar: a number or a boolean as
// such (YAML 1.2's core schema; its numbers are JSON's), anything else as its text.
nlohmann::json typed_value(const std::string& v) {
  if (v == "true" || v == "True" || v == "TRUE") return true;
  if (v == "false" || v == "False" || v == "FALSE") return false;
  const nlohmann::json number = nlohmann::json::parse(v, nullptr, false);
  if (!number.is_discarded() && number.is_number()) return number;
  return v;
}

nlohmann::json text_or_null(const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); }

// A number, or null when not shown.
nlohmann::json number_or_null(bool shown, double x) { return shown ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

std::string sweep_text_header(const std::vector<search::SweepAxis>& axes, const SweepBudget& budget, bool searched) {
  std::string head;
  for (const auto& a : axes) head += fmt::format("{:>16} ", a.key);
  if (!searched) head += fmt::format("{:>13} ", "micro-batches");
  head += fmt::format("{:>10} {:>10} {:>7} {:>6} {:>9}", "samples/s", "tokens/s", "TFLOPs", "MFU", "memory");
  if (budget.tokens > 0)
    head += fmt::format(" {:>11} {:>11} {:>11} {:>11} {:>11}", "train", "w/ failures", "cost", "spot train", "spot cost");
  if (searched) head += "  configuration";
  return head + "\n";
}

std::string sweep_text_row(const search::SweepPoint& p, const SweepBudget& budget, bool searched) {
  std::string s;
  for (const auto& v : p.values) s += fmt::format("{:>16} ", v);
  if (!searched && p.status != PointStatus::invalid) s += fmt::format("{:>13} ", microbatches(p.job));
  if (!fits(p)) return s + why_not(p) + "\n";
  const StepMetrics& e = p.metrics;
  s += fmt::format("{:>10.2f} {:>10.0f} {:>7.1f} {:>5.1f}% {:>5.1f} GiB", e.samples_per_s, e.tokens_per_s,
                   e.tflops_per_gpu, 100 * e.mfu, e.memory.total() / units::GiB);
  const TrainingCost b = budgeted(p, budget);
  auto usd = [](double x) { return x > 0 ? fmt::format("${:.0f}", x) : std::string("-"); };
  if (budget.tokens > 0)
    s += fmt::format(" {:>11} {:>11} {:>11} {:>11} {:>11}", duration(b.seconds), duration(b.failure_seconds),
                     usd(b.on_demand_usd), b.has_spot ? duration(b.spot_seconds) : "-",
                     b.has_spot ? usd(b.spot_usd) : "-");
  if (searched) s += "  " + p.configuration;
  return s + "\n";
}

std::string sweep_microbatch_note(const search::MicrobatchPolicy& policy) {
  if (!policy.searched_because.empty())
    return fmt::format("points: each searched for its best configuration, as partune search ({}; give one, or --set "
                       "a layout key, to estimate each point as written); micro-batches: each point's search chooses "
                       "them\n",
                       policy.searched_because);
  if (policy.searched) return "micro-batches: each point's search chooses them\n";
  if (!policy.adapted)
    return fmt::format("micro-batches: {} at every point, fixed by {}; a point they do not divide the batch into is "
                       "invalid\n",
                       policy.microbatches, policy.fixed_by);
  return fmt::format("micro-batches: the job leaves them open, so each point keeps the global batch and {} "
                     "sequences per micro-batch (or the largest smaller size that divides its share of the batch)\n",
                     policy.microbatch_size);
}

std::string sweep_csv_header(const std::vector<search::SweepAxis>& axes) {
  std::string s;
  for (const auto& a : axes) s += csv_field(a.key) + ",";
  return s + "status,samples_per_s,tokens_per_s,tflops_per_gpu,mfu,peak_memory_bytes,fits,microbatches,"
             "microbatch_size,configuration,time_to_train_s,cost_on_demand,spot_time_to_train_s,cost_spot,"
             "time_to_train_with_failures_s,reason\n";
}

std::string sweep_csv_row(const search::SweepPoint& p, const SweepBudget& budget) {
  std::string s;
  for (const auto& v : p.values) s += csv_field(v) + ",";
  s += csv_field(to_string(p.status)) + ",";
  if (p.status == PointStatus::invalid) return s + ",,,,,,,,,,,,,," + csv_field(p.reason) + "\n";
  const StepMetrics& e = p.metrics;
  const TrainingCost b = budgeted(p, budget);
  const bool run = fits(p), train = run && budget.tokens > 0;
  return s + fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_number(run, e.samples_per_s),
                         csv_number(run, e.tokens_per_s), csv_number(run, e.tflops_per_gpu), csv_number(run, e.mfu),
                         csv_number(p.has_metrics, e.memory.total()), p.has_metrics ? (e.fits ? "true" : "false") : "",
                         p.job.parallel.microbatches, p.job.microbatch_size(), csv_field(p.configuration),
                         csv_number(train, b.seconds), csv_number(train && b.on_demand_usd > 0, b.on_demand_usd),
                         csv_number(train && b.has_spot, b.spot_seconds), csv_number(train && b.has_spot, b.spot_usd),
                         csv_number(train && std::isfinite(b.failure_seconds), b.failure_seconds), csv_field(p.reason));
}

nlohmann::json sweep_point_json(const std::vector<search::SweepAxis>& axes, const search::SweepPoint& p,
                                const SweepBudget& budget) {
  const bool loaded = p.status != PointStatus::invalid;
  nlohmann::json point = {{"index", p.index}, {"status", to_string(p.status)}, {"ok", fits(p)}};
  point["values"] = nlohmann::json::object();
  for (std::size_t a = 0; a < axes.size(); ++a) point["values"][axes[a].key] = typed_value(p.values[a]);
  point["reason"] = fits(p) ? nlohmann::json(nullptr) : nlohmann::json(p.reason);
  // The keys of estimate --json (with fits false and why, when it does not fit).
  point["estimate"] = p.has_metrics ? estimate_json(p.job, p.metrics) : nlohmann::json(nullptr);
  point["configuration"] = loaded ? nlohmann::json(p.configuration) : nlohmann::json(nullptr);
  point["microbatches"] = loaded ? nlohmann::json(p.job.parallel.microbatches) : nlohmann::json(nullptr);
  point["microbatch_size"] = loaded ? nlohmann::json(p.job.microbatch_size()) : nlohmann::json(nullptr);
  point["simulated"] = p.simulated;
  const TrainingCost b = budgeted(p, budget);
  const bool train = fits(p) && budget.tokens > 0;
  point["time_to_train_s"] = number_or_null(train, b.seconds);
  // With the hardware's failures (goodput.hpp): the Young/Daly checkpoints, restarts and lost work.
  point["time_to_train_with_failures_s"] = number_or_null(train && std::isfinite(b.failure_seconds), b.failure_seconds);
  point["goodput"] = number_or_null(train, b.goodput);
  point["cost_on_demand"] = number_or_null(train && b.on_demand_usd > 0, b.on_demand_usd);
  point["spot_interruptions_per_hour"] = number_or_null(train && b.has_spot, b.spot_interruptions_per_hour);
  point["spot_time_to_train_s"] = number_or_null(train && b.has_spot, b.spot_seconds);  // infinity: null too
  point["cost_spot"] = number_or_null(train && b.has_spot, b.spot_usd);
  return point;
}

nlohmann::json sweep_json_of(const std::vector<search::SweepAxis>& axes, const search::MicrobatchPolicy& policy,
                             nlohmann::json points) {
  nlohmann::json j;
  j["axes"] = nlohmann::json::array();
  for (const auto& a : axes) {
    nlohmann::json values = nlohmann::json::array();
    for (const auto& v : a.values) values.push_back(typed_value(v));
    j["axes"].push_back({{"key", a.key}, {"values", values}});
  }
  j["microbatch_policy"] = {{"adapted", policy.adapted && !policy.searched},
                       {"searched", policy.searched},
                       {"fixed_by", text_or_null(policy.fixed_by)},
                       {"searched_because", text_or_null(policy.searched_because)},
                       {"job_microbatches", policy.microbatches},
                       {"job_microbatch_size", policy.microbatch_size}};
  j["points"] = std::move(points);
  return j;
}

nlohmann::json sweep_json(const std::vector<search::SweepAxis>& axes, const search::MicrobatchPolicy& policy,
                          const std::vector<search::SweepPoint>& points, const SweepBudget& budget) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& p : points) list.push_back(sweep_point_json(axes, p, budget));
  return sweep_json_of(axes, policy, std::move(list));
}

std::string sweep_share(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                        const SweepBudget& budget, bool searched) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : points)
    out.push_back({{"index", p.index},
                   {"text", sweep_text_row(p, budget, searched)},
                   {"csv", sweep_csv_row(p, budget)},
                   {"json", sweep_point_json(axes, p, budget)}});
  return out.dump();
}

SweepOutput sweep_output(const std::string& origin, const std::vector<search::SweepAxis>& axes,
                         const search::MicrobatchPolicy& policy, const SweepBudget& budget, bool searched,
                         const std::vector<std::string>& shares) {
  std::vector<nlohmann::json> all;
  for (const std::string& share : shares)
    for (auto& p : nlohmann::json::parse(share)) all.push_back(std::move(p));
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a["index"] < b["index"]; });
  const auto invalid = [](const auto& p) { return p["json"]["status"] == to_string(PointStatus::invalid); };
  if (std::all_of(all.begin(), all.end(), invalid) && !all.empty())
    throw ScenarioError(origin, "", all.front()["json"]["reason"].get<std::string>());
  SweepOutput out;
  out.text = sweep_text_header(axes, budget, searched);
  out.csv = sweep_csv_header(axes);
  nlohmann::json objects = nlohmann::json::array();
  for (const auto& p : all) {
    out.text += p["text"].get<std::string>();
    out.csv += p["csv"].get<std::string>();
    objects.push_back(p["json"]);
  }
  out.text += sweep_microbatch_note(policy);
  out.json = sweep_json_of(axes, policy, std::move(objects));
  return out;
}

}  // namespace partune::report
