#include "search_execute.hpp"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "backend_run.hpp"
#include "progress.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/search/execution_sample.hpp"
#include "partune/search/space.hpp"
#include "partune/sim/ranking.hpp"
#include "partune/sim/simulator.hpp"
#include "partune/sim/step_statistics.hpp"

namespace partune::cli {

constexpr double kMinKendallTau = 0.8;
constexpr double kMaxRegretPct = 5.0;

namespace {

namespace fs = std::filesystem;

// One candidate as the backend runs it: its job file in a scratch folder, the model the
// backend's scaling rule gives, and the simulated step of exactly that job.
struct Executed {
  std::size_t rank = 0;  // 0-based place in the search's ranking
  Job job, ran;
  backend::BackendModelConfig model;
  std::string file;
  double predicted_step = 0;
  std::vector<std::vector<double>> timed;  // per run
  std::string error;
};

Executed prepare(const search::Candidate& c, std::size_t rank, const fs::path& dir) {
  Executed e;
  e.rank = rank;
  e.job = c.job;
  e.model = backend::scaled_model(c.job, backend::ScaleOptions{});
  e.ran = backend::scaled_job(c.job, e.model);
  e.file = (dir / fmt::format("candidate-{}.yaml", rank + 1)).string();
  std::ofstream(e.file) << job_yaml(e.ran, "partune search --execute: candidate " + std::to_string(rank + 1));
  e.predicted_step = sim::simulate(e.ran, sim::SimOptions{}).metrics.step_time;
  return e;
}

void run_once(Executed& e, const ExecuteOptions& opt) {
  const BackendRun run = run_on_backend({e.file, {}, opt.steps, e.ran.world_size(), e.model});
  const auto& s = run.measured.step_seconds;
  e.timed.emplace_back(s.begin() + std::min<std::ptrdiff_t>(opt.warmup, static_cast<std::ptrdiff_t>(s.size())), s.end());
  if (e.timed.back().empty()) throw std::runtime_error("no step after the warm-up");
}

// Removes the scratch folder of candidate job files.
struct ScratchFolder {
  fs::path path;
  ScratchFolder() {
    char name[] = "/tmp/partune-execute-XXXXXX";
    if (!::mkdtemp(name)) throw std::runtime_error("cannot create a temporary directory");
    path = name;
  }
  ~ScratchFolder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

nlohmann::json agreement_json(const std::vector<Executed>& ran_ok) {
  std::vector<double> predicted, measured;
  for (const Executed& e : ran_ok) {
    const double sequences = e.ran.training.global_batch;
    predicted.push_back(sequences / e.predicted_step);
    measured.push_back(sequences / sim::step_statistics(e.timed).low);
  }
  const sim::RankAgreement a = sim::rank_agreement(predicted, measured);
  const auto finite = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); };
  return {{"kendall_tau", finite(a.kendall_tau)},
          {"spearman_rho", finite(a.spearman_rho)},
          {"predicted_best", search::describe(ran_ok[static_cast<std::size_t>(a.predicted_best)].job)},
          {"measured_best", search::describe(ran_ok[static_cast<std::size_t>(a.measured_best)].job)},
          {"measured_rank_of_predicted_best", a.measured_rank_of_predicted_best},
          {"regret_pct", a.regret_pct},
          {"executed", ran_ok.size()}};
}

nlohmann::json candidate_json(const Executed& e) {
  nlohmann::json j = {{"search_rank", e.rank + 1},
                      {"configuration", search::describe(e.job)},
                      {"file_world_size", e.ran.world_size()},
                      {"predicted_step_s", e.predicted_step}};
  if (!e.error.empty()) {
    j["error"] = e.error;
    return j;
  }
  const sim::StepStatistics s = sim::step_statistics(e.timed);
  j["measured_step_s"] = s.low;
  j["measured_ci95_s"] = {s.low_ci_lo, s.low_ci_hi};
  j["measured_median_s"] = s.median;
  j["noise_floor_pct"] = std::isfinite(s.noise_floor_pct) ? nlohmann::json(s.noise_floor_pct) : nlohmann::json();
  j["error_pct"] = 100.0 * (e.predicted_step - s.low) / s.low;
  return j;
}

}  // namespace

nlohmann::json execute_candidates(const search::SearchReport& report, const ExecuteOptions& opt) {
  ScratchFolder scratch;
  std::vector<Executed> executed;
  for (std::size_t i : search::execution_sample(report.ranked.size(), static_cast<std::size_t>(opt.candidates)))
    executed.push_back(prepare(report.ranked[i], i, scratch.path));
  // Interleaved: each round runs every candidate once.
  const long total = static_cast<long>(opt.repeats * executed.size());
  long done = 0;
  for (int r = 0; r < opt.repeats; ++r)
    for (Executed& e : executed) {
      if (opt.progress) progress_bar(done++, total, "backend runs");
      if (!e.error.empty()) continue;
      try {
        run_once(e, opt);
      } catch (const std::exception& ex) {
        e.error = ex.what();
      }
    }
  if (opt.progress) std::cerr << "\r\033[K" << std::flush;
  nlohmann::json out = {{"statistic", fmt::format("{:g}th percentile of the timed steps of {} interleaved runs",
                                                  100 * sim::kLowQuantile, opt.repeats)},
                        {"steps", opt.steps},
                        {"warmup", opt.warmup},
                        {"candidates", nlohmann::json::array()}};
  std::vector<Executed> ran_ok;
  for (const Executed& e : executed) {
    out["candidates"].push_back(candidate_json(e));
    if (e.error.empty()) ran_ok.push_back(e);
  }
  if (ran_ok.size() < 2)
    throw std::runtime_error(fmt::format("--execute: {} of {} candidates ran on the backend; a ranking needs two",
                                         ran_ok.size(), executed.size()));
  out["agreement"] = agreement_json(ran_ok);
  return out;
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

std::string missed_ranking_targets(const nlohmann::json& execution) {
  const auto& a = execution.at("agreement");
  std::vector<std::string> missed;
  if (a["kendall_tau"].is_null() || a["kendall_tau"].get<double>() < kMinKendallTau)
    missed.push_back(a["kendall_tau"].is_null() ? std::string("Kendall's tau undefined (ties)")
                                                : fmt::format("Kendall's tau {:.2f} < {:.1f}", a["kendall_tau"].get<double>(), kMinKendallTau));
  if (a["regret_pct"].get<double>() > kMaxRegretPct)
    missed.push_back(fmt::format("regret {:.1f}% > {:.0f}%", a["regret_pct"].get<double>(), kMaxRegretPct));
  return fmt::format("{}", fmt::join(missed, "; "));
}

}  // namespace partune::cli
