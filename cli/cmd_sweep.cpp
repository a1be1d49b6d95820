// partune sweep JOB.yaml --vary KEY=V1,V2 [--vary ...] [--search] [--tokens N] [--price-per-node-hour P] [--csv FILE]
//   [--report FILE.html] [--json] [--threads N] [--set k=v ...]: fitting points priced, others say why (sweep_report)
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/launch/mpi_world.hpp"
#include "progress.hpp"
#include "report_file.hpp"
#include "partune/report/sweep_job.hpp"
#include "partune/report/sweep_report.hpp"

namespace partune::cli {
namespace {

struct SweepCommand {
  std::string job, csv, report;
  std::vector<std::string> vary;
  bool json = false;
  search::SweepOptions options;  // --set, --search, --threads
  report::SweepBudget budget;
};

// On a terminal (standard error), the points done; with --search also the current
// point's own search, which runs for minutes: "[####......] 12/32 simulated (point 2 of 4)".
void show_progress(search::SweepOptions& so, bool searched) {
  auto point = std::make_shared<std::pair<long, long>>(0, 0);  // (done, total)
  auto phase = std::make_shared<std::string>();  // the phase on the line now: a new one clears it first
  auto bar = [phase](long done, long total, const std::string& what, const std::string& label) {
    if (what != *phase) std::fprintf(stderr, "\r%100s\r", "");
    *phase = what;
    progress_bar(done, total, label.c_str());
  };
  so.progress = [point, bar](long done, long total) {
    *point = {done, total};
    bar(done, total, "points", "points");
  };
  if (searched)
    so.search_options.progress = [point, bar](long done, long total, const char* what) {
      bar(done, total, what, fmt::format("{} (point {} of {})", what, point->first + 1, point->second));
    };
}

void run_sweep_command(const SweepCommand& opt) {
  const launch::MpiWorld world = launch::mpi_world();
  search::SweepOptions so = opt.options;
  const search::SweepJob job = report::sweep_job_file(opt.job, so.overrides);  // a bad job or --set fails here, once
  so.axes = search::job_sweep_axes(job, opt.vary, "--vary");
  if (so.axes.empty()) throw ScenarioError(opt.job, "sweep", "nothing to vary: give --vary KEY=V1,V2 or a sweep: section");
  const search::MicrobatchPolicy policy = microbatch_policy(job, so);  // searched: --search, or no layout to estimate
  // Under MPI the runtime's threads forbid forking: searched points simulate in fresh processes.
  if (world.mpi) so.search_options.simulate_batch = launch::spawned_simulate_batch();
  so.offset = world.rank;  // under MPI, this rank's share of the points
  so.stride = world.size;
  const bool terminal = ::isatty(STDERR_FILENO) && !opt.json && world.prints();
  if (terminal) show_progress(so, policy.searched);
  // Opened first: a --csv or --report path that cannot be written fails before the sweep.
  std::optional<AtomicFile> csv, page = open_report(world.prints() ? opt.report : "");
  if (!opt.csv.empty() && world.prints()) csv.emplace(opt.csv);
  const std::vector<search::SweepPoint> points = search::run_sweep(job, so);
  if (terminal) std::fprintf(stderr, "\r%100s\r", "");
  const std::vector<std::string> shares = launch::mpi_all_gather(report::sweep_share(so.axes, points, opt.budget, policy.searched));
  if (!world.prints()) return;
  const report::SweepOutput out = report::sweep_output(opt.job, so.axes, policy, opt.budget, policy.searched, shares);
  if (csv) {
    csv->write(out.csv);
    csv->commit();
    std::cerr << "wrote CSV " << opt.csv << "\n";
  }
  std::cout << (opt.json ? out.json.dump(2) + "\n" : out.text);
  write_report(page, [&] { return report::sweep_html(opt.job, out.json); });
}

}  // namespace

void register_sweep(CLI::App& app) {
  auto* cmd = app.add_subcommand("sweep", "What-if sweep: every combination of the varied keys, estimated or searched");
  auto opt = std::make_shared<SweepCommand>();
  cmd->add_option("job", opt->job, "job file (YAML); its sweep: section adds axes")->required();
  cmd->add_option("--vary", opt->vary,
                  "KEY=V1,V2,...: any key --set takes (nodes=16,32, instance_type=p4d.24xlarge,p5.48xlarge, "
                  "model.base=llama-2-7b,llama-2-13b); repeat for more axes");
  cmd->add_option("--set", opt->options.overrides, "override a job key at every point");
  cmd->add_flag("--search", opt->options.search,
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
  add_report_option(cmd, &opt->report);
  cmd->add_option("--threads", opt->options.threads, "points estimated at once (default: one per core)")
      ->check(count_in(1, 1024));
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] { run_sweep_command(*opt); });
}

}  // namespace partune::cli
