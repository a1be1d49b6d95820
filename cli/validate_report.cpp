#include "validate_report.hpp"

#include <fmt/format.h>

#include <cmath>
#include <sstream>

#include "partune/launch/chrome_trace.hpp"
#include "partune/validate/targets.hpp"

namespace partune::cli {

namespace {

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

std::string signed_pct(double pct) { return std::isfinite(pct) ? fmt::format("{:+.1f}%", pct) : std::string("n/a"); }

double json_pct(const nlohmann::json& v) { return v.is_null() ? NAN : v.get<double>(); }

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json statistics_json(const validate::StepStatistics& m) {
  return {{"statistic", fmt::format("{:g}th percentile of every timed step", 100 * validate::kLowQuantile)},
          {"runs", m.runs},
          {"samples", m.samples},
          {"low_s", m.low},
          {"low_ci95_s", {m.low_ci_lo, m.low_ci_hi}},
          {"median_s", m.median},
          {"noise_floor_pct", finite_or_null(m.noise_floor_pct)}};
}

}  // namespace

std::string layout(const Job& job) {
  const ParallelConfig& pc = job.parallel;
  std::string s = fmt::format("tp{} pp{}", pc.tensor_parallel_degree, pc.pipeline_parallel_degree);
  if (pc.pipeline_parallel_degree > 1)
    s += pc.pipeline == PipelineSchedule::gpipe        ? " gpipe"
         : pc.pipeline == PipelineSchedule::zb_h1     ? " zb-h1"
         : pc.pipeline == PipelineSchedule::zbv       ? " zbv"
         : pc.pipeline == PipelineSchedule::dualpipev ? " dualpipev"
         : pc.virtual_stages > 1                ? fmt::format(" interleaved-v{}", pc.virtual_stages)
                                                : " 1f1b";
  s += fmt::format(" dp{}", job.data_parallel_degree());
  if (pc.sharded_data_parallel_degree > 1) s += fmt::format(" sdp{}", pc.sharded_data_parallel_degree);
  if (pc.shard_optimizer_state && pc.sharded_data_parallel_degree == 1) s += pc.shard_gradients ? " zero2" : " zero1";
  if (pc.activation_checkpointing == Checkpointing::full) s += " ckpt-full";
  if (pc.activation_checkpointing == Checkpointing::selective) s += " ckpt-sel";
  if (pc.activation_checkpointing == Checkpointing::op) s += " ckpt-op";
  if (pc.activation_checkpointing == Checkpointing::dots) s += " ckpt-dots";
  if (pc.offload_activations) s += " offload";
  if (job.training.gradient_accumulation > 1) s += fmt::format(" ga{}", job.training.gradient_accumulation);
  if (job.lm_head_on_first_stage()) s += " head-first";
  if (pc.placement_strategy != PlacementOrder()) s += " " + pc.placement_strategy.smp_name();
  return s;
}

nlohmann::json comparison_json(const ValidatedJob& v, const Job& ran, const validate::Comparison& c) {
  nlohmann::json kinds = nlohmann::json::array();
  for (const auto& k : c.kinds)
    kinds.push_back({{"kind", to_string(k.kind)}, {"predicted_s", k.predicted_s}, {"measured_s", k.measured_s},
                     {"error_pct", k.error_pct}});
  nlohmann::json memory = nlohmann::json::array();
  for (const auto& m : c.memory)
    memory.push_back({{"rank", m.rank}, {"stage", m.stage}, {"predicted_bytes", m.predicted_bytes},
                      {"measured_bytes", m.measured_bytes}, {"error_pct", m.error_pct}});
  return {{"job", v.name},
          {"file", v.file},
          {"instance_type", ran.cluster.instance.name},
          {"world_size", ran.world_size()},
          {"layout", layout(ran)},
          {"model", v.model},
          {"threads_per_rank", v.threads_per_rank},
          {"steps", {{"run", c.steps_run}, {"warmup", c.warmup}, {"timed_seconds", c.timed_seconds}}},
          {"step_time", {{"predicted_s", c.predicted_step_s}, {"measured_s", c.measured_step_s},
                         {"error_pct", c.step_error_pct}, {"within_noise", c.within_noise}}},
          {"measured_statistics", statistics_json(c.measured)},
          {"kinds", kinds},
          {"memory", memory},
          {"reserved_bytes_left_out", c.reserved_bytes_left_out},
          {"predicted_event_kinds", c.predicted_kinds},
          {"measured_event_kinds", c.measured_kinds},
          {"missing_measured_kinds", c.missing_measured_kinds}};
}

nlohmann::json job_result(const validate::SuiteJob& c, const validate::JobValidation& j, const std::string& trace_dir) {
  nlohmann::json out;
  if (!j.pooled) {
    out = failure_json(c.job.name, c.file, j.error);
    out["oversubscribed"] = j.oversubscribed;
    return out;
  }
  const validate::Comparison& cmp = *j.pooled;
  out = comparison_json({c.job.name, c.file, describe_model(c.ran.model, c.ran.parallel.flash_attention), j.threads_per_rank}, c.ran, cmp);
  out["oversubscribed"] = j.oversubscribed;
  if (!trace_dir.empty()) {
    const std::string pfile = trace_dir + "/" + c.job.name + "-predicted.json";
    const std::string mfile = trace_dir + "/" + c.job.name + "-measured.json";
    launch::write_chrome_trace(pfile, j.prediction->result.events, c.ran.cluster.instance.gpus_per_node);
    // The timed step whose time is the median stands for the run.
    launch::write_chrome_trace(mfile, cmp.median_step_events, c.ran.cluster.instance.gpus_per_node);
    out["traces"] = {{"predicted", pfile}, {"measured", mfile}, {"measured_step", cmp.median_step + 1}};
  }
  return out;
}

nlohmann::json failure_json(const std::string& name, const std::string& file, const std::string& error) {
  return {{"job", name}, {"file", file}, {"error", error}};
}

nlohmann::json summary_json(const validate::SuiteSummary& s) {
  return {{"jobs", s.jobs},
          {"failed", s.failed},
          {"median_abs_step_error_pct", s.median_abs_step_error_pct},
          {"worst_abs_step_error_pct",
           s.worst_abs_step_error_pct >= 0 ? nlohmann::json(s.worst_abs_step_error_pct) : nlohmann::json()},
          {"worst_job", s.worst_job},
          {"median_abs_memory_error_pct", s.median_abs_memory_error_pct},
          {"step_errors_over", "jobs whose ranks fit the host's cores"},
          {"oversubscribed_jobs", s.oversubscribed},
          {"oversubscribed_median_abs_step_error_pct", finite_or_null(s.oversubscribed_median_abs_step_error_pct)},
          {"jobs_within_noise", s.within_noise},
          {"memory_errors_over", "every rank of every job"}};
}

std::string job_text(const nlohmann::json& r) {
  std::ostringstream o;
  o << fmt::format("{} ({})\n", r.at("job").get<std::string>(), r.at("file").get<std::string>());
  if (r.contains("error")) {
    o << "  FAILED: " << r.at("error").get<std::string>() << "\n";
    return o.str();
  }
  const auto& st = r.at("steps");
  o << fmt::format("  {} rank{} on {}: {}; {} thread{} per rank\n", r.at("world_size").get<int>(),
                   r.at("world_size").get<int>() == 1 ? "" : "s", r.at("instance_type").get<std::string>(),
                   r.at("layout").get<std::string>(), r.at("threads_per_rank").get<int>(),
                   r.at("threads_per_rank").get<int>() == 1 ? "" : "s");
  o << fmt::format("  model run: {}\n", r.at("model").get<std::string>());
  const auto& ms = r.at("measured_statistics");
  const nlohmann::json& floor = ms.at("noise_floor_pct");
  o << fmt::format("  measured: {} (steps {}..{} of {} interleaved run{}: {} steps), 95% interval {:.4f}..{:.4f} s, "
                   "median {:.4f} s; noise floor {}{}\n",
                   ms.at("statistic").get<std::string>(), st.at("warmup").get<int>() + 1, st.at("run").get<int>(),
                   ms.at("runs").get<int>(), ms.at("runs").get<int>() == 1 ? "" : "s", ms.at("samples").get<int>(),
                   ms.at("low_ci95_s")[0].get<double>(), ms.at("low_ci95_s")[1].get<double>(),
                   ms.at("median_s").get<double>(),
                   floor.is_null() ? std::string("unknown (one run)") : fmt::format("{:.1f}%", floor.get<double>()),
                   r.value("oversubscribed", false) ? "; oversubscribed (more rank threads than cores)" : "");
  o << fmt::format("  {:<34} {:>12} {:>12} {:>8}\n", "", "predicted", "measured", "error");
  const auto& t = r.at("step_time");
  o << fmt::format("  {:<34} {:>10.4f} s {:>10.4f} s {:>8}\n", "step time", t.at("predicted_s").get<double>(),
                   t.at("measured_s").get<double>(), signed_pct(t.at("error_pct").is_null() ? NAN : t.at("error_pct").get<double>()));
  for (const auto& k : r.at("kinds"))
    o << fmt::format("  {:<34} {:>10.4f} s {:>10.4f} s {:>8}\n",
                     k.at("kind").get<std::string>() + " (per rank, mean)", k.at("predicted_s").get<double>(),
                     k.at("measured_s").get<double>(),
                     signed_pct(k.at("error_pct").is_null() ? NAN : k.at("error_pct").get<double>()));
  for (const auto& m : r.at("memory"))
    o << fmt::format("  {:<34} {:>8.1f} MiB {:>8.1f} MiB {:>8}\n",
                     fmt::format("peak memory rank {} (stage {})", m.at("rank").get<int>(), m.at("stage").get<int>()),
                     mib(m.at("predicted_bytes").get<double>()), mib(m.at("measured_bytes").get<double>()),
                     signed_pct(m.at("error_pct").is_null() ? NAN : m.at("error_pct").get<double>()));
  if (!r.at("missing_measured_kinds").empty())
    o << "  predicted kinds never measured: " << r.at("missing_measured_kinds").dump() << "\n";
  if (r.contains("traces"))
    o << fmt::format("  traces: {} and {} (measured step {})\n", r["traces"]["predicted"].get<std::string>(),
                     r["traces"]["measured"].get<std::string>(), r["traces"]["measured_step"].get<int>());
  return o.str();
}

std::string summary_text(const nlohmann::json& results, const nlohmann::json& s) {
  std::ostringstream o;
  o << fmt::format("{:<30} {:>5}  {:<38} {:>10} {:>10} {:>8} {:>12}\n", "job", "world", "layout", "predicted",
                   "measured", "error", "memory error");
  for (const auto& r : results) {
    if (r.contains("error")) {
      o << fmt::format("{:<30} FAILED\n", r["job"].get<std::string>());
      continue;
    }
    // The memory column: the rank with the largest |error|.
    double worst_mem = NAN;
    for (const auto& m : r["memory"]) {
      const double e = json_pct(m["error_pct"]);
      if (std::isfinite(e) && (!std::isfinite(worst_mem) || std::abs(e) > std::abs(worst_mem))) worst_mem = e;
    }
    o << fmt::format("{:<30} {:>5}  {:<38} {:>8.4f} s {:>8.4f} s {:>9} {:>12}\n", r["job"].get<std::string>(),
                     r["world_size"].get<int>(), r["layout"].get<std::string>(),
                     r["step_time"]["predicted_s"].get<double>(), r["step_time"]["measured_s"].get<double>(),
                     signed_pct(json_pct(r["step_time"]["error_pct"])) +
                         (r["step_time"].value("within_noise", false) ? "~"
                          : r.value("oversubscribed", false)          ? "*"
                                                                      : " "),
                     signed_pct(worst_mem));
  }
  const auto pct = [](const nlohmann::json& v) {
    return std::isfinite(json_pct(v)) ? fmt::format("{:.1f}%", v.get<double>()) : std::string("n/a");
  };
  o << fmt::format("\n{} job{}, {} failed; step time |error|: median {}, worst {}{} (jobs that fit the cores); peak memory |error| (every "
                   "rank): median {}\n",
                   s["jobs"].get<int>(), s["jobs"].get<int>() == 1 ? "" : "s", s["failed"].get<int>(),
                   pct(s["median_abs_step_error_pct"]), pct(s["worst_abs_step_error_pct"]),
                   s["worst_job"].get<std::string>().empty() ? "" : " (" + s["worst_job"].get<std::string>() + ")",
                   pct(s["median_abs_memory_error_pct"]));
  if (s.value("oversubscribed_jobs", 0) > 0)
    o << fmt::format("{} oversubscribed job{} (*: more rank threads than cores, judged apart): median |step error| {}\n",
                     s["oversubscribed_jobs"].get<int>(), s["oversubscribed_jobs"].get<int>() == 1 ? "" : "s",
                     pct(s["oversubscribed_median_abs_step_error_pct"]));
  o << fmt::format("measured: the {:g}th percentile of every timed step of every run; ~: |error| inside the job's "
                   "noise floor ({} job{})\n",
                   100 * validate::kLowQuantile, s.value("jobs_within_noise", 0), s.value("jobs_within_noise", 0) == 1 ? "" : "s");
  const validate::ValidationTargets t;
  o << fmt::format("memory error column: the rank with the largest |error|; targets: median |step error| <= {:g}%, "
                   "worst <= {:g}%, memory median <= {:g}%\n",
                   t.median_step_error_pct, t.worst_step_error_pct, t.median_memory_error_pct);
  return o.str();
}

}  // namespace partune::cli
