// Today's prediction of the GPU runs on record (replay.hpp).
#include "partune/validate/replay.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "partune/costmodel/scaled_job.hpp"
#include "partune/costmodel/calibration_fit.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/kernel_breakdown.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/validate/validation_suite.hpp"

namespace partune::validate {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw ScenarioError(file.string(), "", "cannot be read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ScenarioError(file.string(), "", std::string("not JSON: ") + e.what());
  }
}

// A recorded path (relative to the repository the run was made from): as it is when it
// exists from here, else under the run folder's ancestors.
fs::path resolve(const std::string& recorded, const fs::path& run) {
  const fs::path p(recorded);
  if (p.is_absolute() || fs::exists(p)) return p;
  for (fs::path up = fs::absolute(run); up.has_parent_path() && up != up.parent_path(); up = up.parent_path())
    if (fs::exists(up / p)) return up / p;
  return p;  // load_job names it when it does not exist
}

// The run's profile file for `instance`: its own, else the catalog's.
fs::path profile_file(const std::string& instance, const fs::path& run) {
  const fs::path own = run / (instance + ".yaml");
  if (fs::exists(own)) return own;
  return resolve("scenarios/clusters/" + instance + ".yaml", run);
}

// replay.yaml's `set:` overrides (none without the file).
std::vector<std::string> run_overrides(const fs::path& run) {
  const fs::path file = run / "replay.yaml";
  if (!fs::exists(file)) return {};
  try {
    const YAML::Node root = YAML::LoadFile(file.string());
    std::vector<std::string> out;
    for (const auto& n : root["set"]) out.push_back(n.as<std::string>());
    return out;
  } catch (const YAML::Exception& e) {
    throw ScenarioError(file.string(), "set", std::string("expected a list of key=value: ") + e.what());
  }
}

// Completes a profile the run's calibration wrote before the dispatch and kernel-class
// keys existed, by calibrate's rule today (replay.hpp).
void complete_profile(GpuProfile& g, const nlohmann::json& calibration) {
  if (g.dispatch > 0 || !calibration.is_object() || !calibration.contains("memory")) return;
  const nlohmann::json& memory = calibration["memory"];
  if (!memory.value("measured", false)) return;
  // The datasheet's for what the calibration did not measure, then calibrate's rule.
  const GpuProfile sheet = load_instance_type(calibration.value("datasheet", std::string())).gpu;
  const double intercept = g.kernel_overhead;  // written as the device gap before the rule
  g.kernel_overhead = sheet.kernel_overhead;
  g.strided_efficiency = sheet.strided_efficiency;
  g.norm_efficiency = sheet.norm_efficiency;
  g.copy_efficiency = sheet.copy_efficiency;
  g.transpose_efficiency = sheet.transpose_efficiency;
  std::vector<std::pair<std::string, double>> bandwidth;
  const nlohmann::json measured = memory.value("bandwidth_GBps", nlohmann::json::object());
  for (const auto& [kernel, GBps] : measured.items())
    if (GBps.is_number()) bandwidth.emplace_back(kernel, GBps.get<double>() * 1e9);
  calibration::apply_memory_measurements(g, intercept, bandwidth);
}

// Refits the profile's own flash kernel from the run's calibrate.json where the profile
// predates the sequence curve (no flash_seq_half), by calibrate's rule today
// (gpu_profile_file.cpp): the kernel the jobs ran (LibTorch's SDPA: calibration::sdpa_kernel;
// partune's where the profile says so), the gradient accumulation of the records before 2026-11-29 taken off at the
// run's add bandwidth, the datasheet's head-dim half-point and other kernels' curves.
void complete_attention(GpuProfile& g, const nlohmann::json& calibration, const fs::path& file) {
  if (g.attention.flash_seq_half > 0 || !calibration.is_object() || !calibration.contains("measurements")) return;
  // The kernel the jobs ran: partune's where the profile (or replay.yaml) names it, else what
  // calibrate's flash_attention: true ran there.
  const bool sdpa = g.attention.kernel != AttentionKernel::partune &&
                    calibration.value("attention_kernel", std::string()) == "sdpa";
  std::vector<calibration::FlashSample> samples;
  for (const auto& a : calibration["measurements"].value("attention", nlohmann::json::array()))
    if (a.value("kernel", std::string()) == (sdpa ? "sdpa" : "flash"))
      samples.push_back({a.at("batch_heads").get<double>(), a.at("seq").get<double>(), a.at("head_dim").get<double>(),
                         a.at("seconds").get<double>()});
  if (samples.empty()) return;
  const nlohmann::json memory = calibration.value("memory", nlohmann::json::object());
  const double add = memory.value("bandwidth_GBps", nlohmann::json::object()).value("add", 0.0) * 1e9;
  if (!calibration.contains("attention_gradients")) {
    if (!(add > 0)) return;  // nothing to take the accumulation off with: the profile as written
    samples = calibration::without_gradient_accumulation(samples, add);
  }
  const GpuProfile sheet = load_instance_type(calibration.value("datasheet", std::string())).gpu;
  const std::string cc = calibration.value("compute_capability", std::string("0"));
  if (cc.empty() || !std::isdigit(static_cast<unsigned char>(cc.front())))
    throw ScenarioError(file.string(), "compute_capability", "'" + cc + "' is not MAJOR.MINOR");
  const calibration::FlashFit fit =
      calibration::fit_flash(samples, sheet.peak_flops_bf16, memory.value("kernel_overhead_us", 0.0) * 1e-6,
                             sheet.attention.flash_head_dim_half);
  g.attention.kernels = sheet.attention.kernels;
  calibration::apply_flash_fit(g, sdpa ? calibration::sdpa_kernel(std::stoi(cc)) : AttentionKernel::partune, fit);
}

// The run's kernel profile of `job`, compared category by category.
void compare_breakdown(const nlohmann::json& breakdown, const Job& ran, ReplayJob& r) {
  if (!breakdown.is_object()) {
    r.breakdown_note = "the run profiled no step kernel by kernel";
    return;
  }
  const nlohmann::json* profile = nullptr;
  for (const auto& p : breakdown["profiles"])
    if (p.value("job", std::string()) == r.job) profile = &p;
  if (!profile) {
    r.breakdown_note = "the run did not profile this job";
    return;
  }
  // A profile of another model (the first device check profiled a scaled-down one): its
  // step is far from the measured one.
  const double profiled = profile->value("step_seconds", 0.0);
  if (std::abs(profiled - r.measured_step_s) > 0.25 * r.measured_step_s) {
    r.breakdown_note = fmt::format("the profiled step ({:.3f} s) is not this job's ({:.3f} s): another model",
                                   profiled, r.measured_step_s);
    return;
  }
  const KernelBreakdown b = kernel_breakdown(ran);
  nlohmann::json measured = (*profile)["by_category_seconds"];
  // The first profiles filed LayerNorm's scale-and-shift gradient kernel (GammaBetaBackward)
  // under "other"; step_kernel_profile now files it with the norms, and so does this.
  for (const auto& k : profile->value("longest_kernels", nlohmann::json::array())) {
    if (k.value("category", std::string()) != "other" ||
        k.value("name", std::string()).find("GammaBeta") == std::string::npos)
      continue;
    const double s = k.value("seconds", 0.0);
    measured["other"] = measured.value("other", 0.0) - s;
    measured["reduction_norm"] = measured.value("reduction_norm", 0.0) + s;
  }
  for (const auto& [name, predicted] : b.categories()) {
    const double m = measured.value(name, 0.0);
    if (m <= 0 && predicted <= 0) continue;
    r.categories.push_back({name, predicted, m, error_pct(predicted, m)});
  }
  r.measured_other_s = measured.value("other", 0.0);
  r.predicted_idle_s = b.dispatch_idle;
  r.measured_idle_s = std::max(0.0, profiled - profile->value("kernel_seconds", 0.0));
  r.predicted_launches = b.launches;
  r.measured_launches = profile->value("kernel_launches", 0L);
}

ReplayJob replay_job(const nlohmann::json& recorded, const fs::path& run, const nlohmann::json& calibration,
                     const nlohmann::json& breakdown, const std::vector<std::string>& overrides,
                     const std::string& device) {
  ReplayJob r;
  r.run = run.string();
  r.job = recorded.value("job", std::string());
  r.file = resolve(recorded.value("file", std::string()), run).string();
  r.profile = profile_file(recorded.value("instance_type", std::string()), run).string();
  std::vector<std::string> set{"instance_type=" + fs::absolute(r.profile).string()};
  const std::vector<std::string> backend = as_run_settings(device);  // how the backend runs a job there
  set.insert(set.end(), backend.begin(), backend.end());
  set.insert(set.end(), overrides.begin(), overrides.end());  // replay.yaml's come after: they win
  for (const std::string& o : overrides)
    if (o.rfind("instance_type=", 0) == 0) r.profile = o.substr(14);
  Job job = load_job(r.file, set);
  complete_profile(job.cluster.instance.gpu, calibration);
  complete_attention(job.cluster.instance.gpu, calibration, run / "calibrate.json");
  ScaleOptions scale;
  scale.whole = device == "cuda";  // the model as validate ran it there
  const Job ran = scaled_job(job, scale);
  r.low_precision_gemms = low_precision_gemms(ran.training.precision);
  const Prediction p = predict(ran);
  r.predicted_step_s = p.result.metrics.step_time;
  r.measured_step_s = recorded.at("step_time").at("measured_s").get<double>();
  r.step_error_pct = error_pct(r.predicted_step_s, r.measured_step_s);
  const nlohmann::json stats = recorded.value("measured_statistics", nlohmann::json::object());
  r.noise_floor_pct = stats.contains("noise_floor_pct") && stats["noise_floor_pct"].is_number()
                          ? stats["noise_floor_pct"].get<double>()
                          : std::nan("");  // one run: no spread between runs
  const KindTimes predicted = predicted_kind_times(p.programs, p.result);
  for (const auto& k : recorded.value("kinds", nlohmann::json::array())) {
    const std::string name = k.value("kind", std::string());
    for (const auto& [kind, seconds] : predicted)
      if (name == to_string(kind)) {
        const double m = k.value("measured_s", 0.0);
        r.kinds.push_back({kind, seconds, m, error_pct(seconds, m)});
      }
  }
  compare_breakdown(breakdown, ran, r);
  return r;
}

}  // namespace

std::vector<ReplayJob> replay_runs(const std::string& dir) {
  if (!fs::is_directory(dir)) throw ScenarioError(dir, "", "not a folder of recorded runs");
  std::vector<fs::path> runs;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename() == "validate.json") runs.push_back(e.path().parent_path());
  std::sort(runs.begin(), runs.end());
  if (runs.empty()) throw ScenarioError(dir, "", "holds no validate.json (a run of scripts/device-check.sh)");
  std::vector<ReplayJob> out;
  for (const fs::path& run : runs) {
    const nlohmann::json validate = read_json(run / "validate.json");
    const nlohmann::json calibration = fs::exists(run / "calibrate.json") ? read_json(run / "calibrate.json") : nullptr;
    const nlohmann::json breakdown = fs::exists(run / "breakdown.json") ? read_json(run / "breakdown.json") : nullptr;
    const std::vector<std::string> overrides = run_overrides(run);
    // Where the run's jobs ran (summary.json; the recorded runs are GPU runs).
    const std::string device =
        fs::exists(run / "summary.json") ? read_json(run / "summary.json").value("device", "cuda") : "cuda";
    const nlohmann::json jobs = validate.value("jobs", nlohmann::json::array());
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      if (!jobs[i].contains("step_time")) continue;  // a job that failed on the device
      try {
        out.push_back(replay_job(jobs[i], run, calibration, breakdown, overrides, device));
      } catch (const nlohmann::json::exception& e) {  // a recorded file of another shape
        throw ScenarioError((run / "validate.json").string(), fmt::format("jobs[{}]", i),
                            std::string("cannot be read as a recorded job (or its run's calibrate.json, "
                                        "breakdown.json): ") + e.what());
      }
    }
  }
  return out;
}

ReplaySummary summarize_replay(const std::vector<ReplayJob>& jobs) {
  ReplaySummary s;
  std::vector<double> errors;
  for (const ReplayJob& j : jobs) {
    ++s.jobs;
    const double e = std::abs(j.step_error_pct);
    errors.push_back(e);
    if (e <= j.step_target_pct()) ++s.steps_within;
    if (e > s.worst_abs_step_error_pct) {
      s.worst_abs_step_error_pct = e;
      s.worst = fs::path(j.run).filename().string() + "/" + j.job;
    }
    for (const CategoryComparison& c : j.categories) {
      ++s.categories;
      if (std::abs(c.error_pct) <= kCategoryTargetPct) ++s.categories_within;
    }
  }
  s.median_abs_step_error_pct = median(errors);
  return s;
}

}  // namespace partune::validate
