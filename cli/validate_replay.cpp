// Printing `partune validate --replay DIR` (validate_replay.hpp).
#include "validate_replay.hpp"

#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "partune/validate/replay.hpp"

namespace partune::cli {

namespace {

std::string run_name(const std::string& run) {
  const std::filesystem::path p(run);
  return p.parent_path().filename().string() + "/" + p.filename().string();
}

nlohmann::json job_json(const validate::ReplayJob& j) {
  nlohmann::json kinds = nlohmann::json::array(), categories = nlohmann::json::array();
  for (const auto& k : j.kinds)
    kinds.push_back({{"kind", to_string(k.kind)}, {"predicted_s", k.predicted_s}, {"measured_s", k.measured_s},
                     {"error_pct", k.error_pct}});
  for (const auto& c : j.categories)
    categories.push_back({{"category", c.category}, {"predicted_s", c.predicted_s}, {"measured_s", c.measured_s},
                          {"error_pct", c.error_pct}});
  nlohmann::json out = {{"run", j.run},
                        {"job", j.job},
                        {"file", j.file},
                        {"profile", j.profile},
                        {"step", {{"predicted_s", j.predicted_step_s}, {"measured_s", j.measured_step_s},
                                  {"error_pct", j.step_error_pct}, {"target_pct", j.step_target_pct()},
                                  {"noise_floor_pct", j.noise_floor_pct}}},
                        {"kinds", kinds},
                        {"categories", categories}};
  if (j.categories.empty()) {
    out["breakdown_note"] = j.breakdown_note;
  } else {
    out["dispatch_idle"] = {{"predicted_s", j.predicted_idle_s}, {"measured_s", j.measured_idle_s}};
    out["launches"] = {{"predicted", j.predicted_launches}, {"measured", j.measured_launches}};
    out["measured_other_s"] = j.measured_other_s;
  }
  return out;
}

std::string job_text(const validate::ReplayJob& j) {
  const bool missed = std::abs(j.step_error_pct) > j.step_target_pct();
  std::string out = fmt::format("{} {}: step {:.1f} ms predicted, {:.1f} ms measured ({:+.1f}%, target {:.0f}%{})\n",
                                run_name(j.run), j.job, 1e3 * j.predicted_step_s, 1e3 * j.measured_step_s,
                                j.step_error_pct, j.step_target_pct(), missed ? ", missed" : "");
  for (const auto& k : j.kinds)
    out += fmt::format("    {:<16} {:8.1f} ms predicted {:8.1f} ms measured {:+7.1f}%\n", to_string(k.kind),
                       1e3 * k.predicted_s, 1e3 * k.measured_s, k.error_pct);
  if (j.categories.empty()) return out + "    kernels: " + j.breakdown_note + "\n";
  for (const auto& c : j.categories)
    out += fmt::format("    kernels {:<14} {:8.1f} ms predicted {:8.1f} ms measured {:+7.1f}%{}\n", c.category,
                       1e3 * c.predicted_s, 1e3 * c.measured_s, c.error_pct,
                       std::abs(c.error_pct) > validate::kCategoryTargetPct ? " (missed)" : "");
  out += fmt::format("    no kernel running {:.1f} ms predicted, {:.1f} ms measured; launches {} predicted, {} measured; "
                     "'other' kernels {:.1f} ms measured\n",
                     1e3 * j.predicted_idle_s, 1e3 * j.measured_idle_s, j.predicted_launches, j.measured_launches,
                     1e3 * j.measured_other_s);
  return out;
}

}  // namespace

void validate_replay(const std::string& dir, bool json) {
  const std::vector<validate::ReplayJob> jobs = validate::replay_runs(dir);
  const validate::ReplaySummary s = validate::summarize_replay(jobs);
  if (json) {
    nlohmann::json out = {{"jobs", nlohmann::json::array()}};
    for (const auto& j : jobs) out["jobs"].push_back(job_json(j));
    out["summary"] = {{"jobs", s.jobs},
                      {"steps_within_target", s.steps_within},
                      {"median_abs_step_error_pct", s.median_abs_step_error_pct},
                      {"worst_abs_step_error_pct", s.worst_abs_step_error_pct},
                      {"worst", s.worst},
                      {"categories", s.categories},
                      {"categories_within_20pct", s.categories_within}};
    std::cout << out.dump(2) << "\n";
  } else {
    for (const auto& j : jobs) std::cout << job_text(j);
    std::cout << fmt::format(
        "\n{} recorded jobs: {} steps within target (bf16 10%, fp8 15%), median |error| {:.1f}%, worst {:.1f}% ({}); "
        "{} of {} profiled kernel categories within 20%\n",
        s.jobs, s.steps_within, s.median_abs_step_error_pct, s.worst_abs_step_error_pct, s.worst,
        s.categories_within, s.categories);
  }
  if (s.steps_within < s.jobs || s.categories_within < s.categories) throw Exit{1};
}

}  // namespace partune::cli
