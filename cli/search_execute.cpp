// The edge of `partune search --execute` (search_execute.hpp): progress and JSON.
#include "search_execute.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include <fmt/format.h>

#include "option_checks.hpp"
#include "progress.hpp"

namespace partune::cli {

namespace {

nlohmann::json finite_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json agreement_json(const validate::Execution& x) {
  const validate::RankAgreement& a = x.agreement;
  const auto configuration = [&](int i) { return x.candidates[x.ran[static_cast<std::size_t>(i)]].configuration; };
  return {{"kendall_tau", finite_or_null(a.kendall_tau)},
          {"spearman_rho", finite_or_null(a.spearman_rho)},
          {"predicted_best", configuration(a.predicted_best)},
          {"measured_best", configuration(a.measured_best)},
          {"measured_rank_of_predicted_best", a.measured_rank_of_predicted_best},
          {"regret_pct", a.regret_pct},
          {"executed", x.ran.size()}};
}

nlohmann::json candidate_json(const validate::ExecutedCandidate& e) {
  nlohmann::json j = {{"search_rank", e.search_rank + 1},
                      {"configuration", e.configuration},
                      {"file_world_size", e.ran.world_size()},
                      {"predicted_step_s", e.predicted_step_s}};
  if (!e.error.empty()) {
    j["error"] = e.error;
    return j;
  }
  const validate::StepStatistics& s = e.measured;
  j["measured_step_s"] = s.low;
  j["measured_ci95_s"] = {s.low_ci_lo, s.low_ci_hi};
  j["measured_median_s"] = s.median;
  j["noise_floor_pct"] = finite_or_null(s.noise_floor_pct);
  j["error_pct"] = 100.0 * (e.predicted_step_s - s.low) / s.low;
  return j;
}

}  // namespace

validate::ExecutionOptions execution_options(const ExecuteOptions& opt) {
  validate::ExecutionOptions eo;
  eo.candidates = opt.candidates;
  eo.repeats = opt.repeats;
  eo.steps = opt.steps;
  eo.warmup = opt.warmup;
  if (opt.progress)
    eo.progress = [](long done, long total) {
      if (done < total) return progress_bar(done, total, "backend runs");
      std::fputs("\r\033[K", stderr);  // the runs are over: the bar goes
      std::fflush(stderr);
    };
  return eo;
}

nlohmann::json execution_json(const validate::Execution& x) {
  nlohmann::json out = {{"statistic", fmt::format("{:g}th percentile of the timed steps of {} interleaved runs",
                                                  100 * validate::kLowQuantile, x.repeats)},
                        {"steps", x.steps},
                        {"warmup", x.warmup},
                        {"candidates", nlohmann::json::array()}};
  for (const validate::ExecutedCandidate& e : x.candidates) out["candidates"].push_back(candidate_json(e));
  out["agreement"] = agreement_json(x);
  return out;
}

nlohmann::json execute_candidates(const search::SearchReport& report, const ExecuteOptions& opt) {
  return execution_json(validate::execute_candidates(report, execution_options(opt)));
}

std::string execution_text(const nlohmann::json& x) {
  std::ostringstream o;
  o << fmt::format("\nexecuted on the backend ({}; {} steps, {} warm-up):\n", x["statistic"].get<std::string>(),
                   x["steps"].get<int>(), x["warmup"].get<int>());
  o << fmt::format("  {:>4}  {:<48} {:>10} {:>22} {:>7} {:>8}\n", "rank", "configuration", "predicted",
                   "measured [95% interval]", "noise", "error");
  for (const auto& c : x["candidates"]) {
    if (c.contains("error")) {
      o << fmt::format("  {:>4}  {:<48} FAILED: {}\n", c["search_rank"].get<int>(),
                       c["configuration"].get<std::string>(), c["error"].get<std::string>());
      continue;
    }
    o << fmt::format("  {:>4}  {:<48} {:>8.4f} s {:>7.4f} [{:.4f}..{:.4f}] {:>7} {:>+7.1f}%\n",
                     c["search_rank"].get<int>(), c["configuration"].get<std::string>(),
                     c["predicted_step_s"].get<double>(), c["measured_step_s"].get<double>(),
                     c["measured_ci95_s"][0].get<double>(), c["measured_ci95_s"][1].get<double>(),
                     c["noise_floor_pct"].is_null() ? std::string("n/a")
                                                    : fmt::format("{:.1f}%", c["noise_floor_pct"].get<double>()),
                     c["error_pct"].get<double>());
  }
  const auto& a = x["agreement"];
  const auto num = [](const nlohmann::json& v) { return v.is_null() ? std::string("n/a") : fmt::format("{:.2f}", v.get<double>()); };
  o << fmt::format("Kendall's τ = {}, Spearman's ρ = {} over {} configurations; the predicted best ({}) is measured "
                   "#{}; regret {:.1f}% against the measured best ({})\n",
                   num(a["kendall_tau"]), num(a["spearman_rho"]), a["executed"].get<int>(),
                   a["predicted_best"].get<std::string>(), a["measured_rank_of_predicted_best"].get<int>(),
                   a["regret_pct"].get<double>(), a["measured_best"].get<std::string>());
  return o.str();
}

void add_execute_options(CLI::App* cmd, ExecuteOptions* opt) {
  cmd->add_option("--execute", opt->candidates,
                  "run the top K candidates and K more from the rest of the ranking on the LibTorch backend, "
                  "and compare the measured ranking with the predicted one (Kendall's tau, regret)")->check(count_in(1, 1000));
  cmd->add_option("--execute-repeats", opt->repeats, "with --execute: interleaved runs of each candidate")
      ->capture_default_str()->check(count_in(1, 100));
  cmd->add_option("--execute-steps", opt->steps, "with --execute: steps per run, 2 warm-up steps included")
      ->capture_default_str()->check(count_in(3, 10000));
}

}  // namespace partune::cli
