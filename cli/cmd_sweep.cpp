// partune sweep JOB.yaml --vary KEY=V1,V2 [--vary ...] [--search] [--tokens N]
//   [--price-per-node-hour P] [--csv FILE] [--json] [--threads N] [--set key=value ...]
// Only points that fit are priced; the others say why (sweep_report.hpp). The line under
// the table says how micro-batches were set (search::microbatch_policy).
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/atomic_file.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/launch/mpi_world.hpp"
#include "progress.hpp"
#include "sweep_report.hpp"

namespace partune::cli {

namespace {

struct SweepCommand {
  std::string job, csv;
  std::vector<std::string> vary, overrides;
  bool search = false, json = false;
  int threads = 0;
  SweepBudget budget;
};

// This rank's points, each as its table line, CSV row and JSON object (what rank 0 puts
// together: under MPI every rank renders its own share).
std::string rendered(const std::vector<search::SweepAxis>& axes, const std::vector<search::SweepPoint>& points,
                     const SweepCommand& opt) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : points)
    out.push_back({{"index", p.index},
                   {"text", sweep_text_row(p, opt.budget, opt.search)},
                   {"csv", sweep_csv_row(p, opt.budget)},
                   {"json", sweep_point_json(axes, p, opt.budget)}});
  return out.dump();
}

// On a terminal (standard error), the points done; with --search also the current
// point's own search, which runs for minutes: "[####......] 12/32 simulated (point 2 of 4)".
void show_progress(search::SweepOptions& so) {
  struct Shown {
    long point = 0, points = 0;
    std::string what;  // the phase on the line now: a new one clears it first
  };
  auto shown = std::make_shared<Shown>();
  auto clear_for = [shown](const std::string& what) {
    if (what != shown->what) std::fprintf(stderr, "\r%100s\r", "");
    shown->what = what;
  };
  so.progress = [shown, clear_for](long done, long total) {
    shown->point = done;
    shown->points = total;
    clear_for("points");
    progress_bar(done, total, "points");
  };
  if (!so.search) return;
  so.search_options.progress = [shown, clear_for](long done, long total, const char* what) {
    const std::string label = fmt::format("{} (point {} of {})", what, shown->point + 1, shown->points);
    clear_for(what);
    progress_bar(done, total, label.c_str());
  };
}

void run_sweep_command(const SweepCommand& opt) {
  const launch::MpiWorld world = launch::mpi_world();
  const Job base = load_job(opt.job, opt.overrides);  // a bad job or --set fails here, once
  search::SweepOptions so;
  try {
    so.axes = search::sweep_axes(base.sweep_axes, opt.vary);
  } catch (const std::invalid_argument& e) {
    throw ScenarioError(opt.job, "--vary", e.what());
  }
  if (so.axes.empty()) throw ScenarioError(opt.job, "sweep", "nothing to vary: give --vary KEY=V1,V2 or a sweep: section");
  so.overrides = opt.overrides;
  so.search = opt.search;
  so.search_options.simulate = true;
  so.threads = opt.threads;
  // Under MPI the runtime's threads forbid forking: searched points simulate in fresh
  // processes.
  if (world.mpi) so.search_options.simulate_batch = launch::spawned_simulate_batch();
  so.offset = world.rank;  // under MPI, this rank's share of the points
  so.stride = world.size;
  const bool terminal = ::isatty(STDERR_FILENO) && !opt.json && world.prints();
  if (terminal) show_progress(so);
  const search::MicrobatchPolicy policy = search::microbatch_policy(opt.job, so);
  // Opened first: a --csv path that cannot be written fails before the sweep.
  std::optional<AtomicFile> csv;
  if (!opt.csv.empty() && world.prints()) csv.emplace(opt.csv);
  const std::vector<search::SweepPoint> points = search::run_sweep(opt.job, so);
  if (terminal) std::fprintf(stderr, "\r%100s\r", "");
  const std::vector<std::string> shares = launch::mpi_all_gather(rendered(so.axes, points, opt));
  if (!world.prints()) return;
  std::vector<nlohmann::json> all;
  for (const std::string& share : shares)
    for (auto& p : nlohmann::json::parse(share)) all.push_back(std::move(p));
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a["index"] < b["index"]; });
  // No point could be loaded (ranks each judged only their share): a mistake in the input.
  const auto invalid = [](const auto& p) {
    return p["json"]["status"] == search::to_string(search::PointStatus::invalid);
  };
  if (std::all_of(all.begin(), all.end(), invalid) && !all.empty())
    throw ScenarioError(opt.job, "", all.front()["json"]["reason"].get<std::string>());
  std::string text = sweep_text_header(so.axes, opt.budget, opt.search), rows = sweep_csv_header(so.axes);
  nlohmann::json objects = nlohmann::json::array();
  for (const auto& p : all) {
    text += p["text"].get<std::string>();
    rows += p["csv"].get<std::string>();
    objects.push_back(p["json"]);
  }
  if (csv) {
    csv->write(rows);
    csv->commit();
  }
  if (opt.json) std::cout << sweep_json_of(so.axes, policy, std::move(objects)).dump(2) << "\n";
  else std::cout << text << sweep_microbatch_note(policy);
}

}  // namespace

void register_sweep(CLI::App& app) {
  auto* cmd = app.add_subcommand("sweep", "What-if sweep: every combination of the varied keys, estimated or searched");
  auto opt = std::make_shared<SweepCommand>();
  cmd->add_option("job", opt->job, "job file (YAML); its sweep: section adds axes")->required();
  cmd->add_option("--vary", opt->vary,
                  "KEY=V1,V2,...: any key --set takes (nodes=16,32, instance_type=p4d.24xlarge,p5.48xlarge, "
                  "model.base=llama-2-7b,llama-2-13b); repeat for more axes");
  cmd->add_option("--set", opt->overrides, "override a job key at every point");
  cmd->add_flag("--search", opt->search,
                "search each point for its best configuration (as partune search; on a terminal, each point's "
                "search shows its progress)");
  cmd->add_option("--tokens", opt->budget.tokens, "token budget for time-to-train (e.g. 300e9)")
      ->check(number_in(0, 1e18, true));
  cmd->add_option("--price-per-node-hour", opt->budget.on_demand_per_hour,
                  "on-demand USD per node-hour (default: the instance type's price:)")
      ->check(number_in(0, 1e9, true));
  cmd->add_option("--spot-price-per-node-hour", opt->budget.spot_per_hour,
                  "spot USD per node-hour (default: the instance type's price:)")
      ->check(number_in(0, 1e9, true));
  cmd->add_option("--spot-interruptions-per-month", opt->budget.interruptions_per_month,
                  "share of spot nodes interrupted a month, e.g. 0.05 for AWS's '<5%' band (default: the instance "
                  "type's; none known: no spot columns)")
      ->check(number_in(0, 1));
  cmd->add_option("--checkpoint-interval-hours", opt->budget.checkpoint_interval_h,
                  "hours between checkpoints (spot: half of it is lost per interruption)")
      ->capture_default_str()
      ->check(number_in(0, 1e6, true));
  cmd->add_option("--restart-hours", opt->budget.restart_h, "hours to restart after a spot interruption")
      ->capture_default_str()
      ->check(number_in(0, 1e6));
  cmd->add_option("--csv", opt->csv, "also write the points as CSV");
  cmd->add_option("--threads", opt->threads, "points estimated at once (default: one per core)")
      ->check(count_in(1, 1024));
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] { run_sweep_command(*opt); });
}

}  // namespace partune::cli
