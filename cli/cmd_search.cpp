// partune search JOB.yaml: the fastest configuration that fits, and why it wins.
#include <unistd.h>
#include <cstdio>
#include <iostream>
#include <optional>

#include "command_line.hpp"
#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/atomic_file.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/launch/backend_process.hpp"
#include "partune/launch/mpi_world.hpp"
#include "partune/search/request.hpp"
#include "progress.hpp"
#include "report_file.hpp"
#include "slow_option.hpp"
#include "search_execute.hpp"
#include "partune/report/search_report.hpp"

namespace partune::cli {
namespace {

struct SearchCommand {
  std::string job, write_job, report;
  std::vector<std::string> overrides, slow;  // slow: --slow specs
  search::SearchRequest request;  // --fix, --explain, --estimator-only, --no-partition, --top-k, ...
  report::SearchPrint print;      // --show, --json, --tokens, --price-per-node-hour
  ExecuteOptions execute;         // --execute K: run candidates on the backend (0: not)
};

void add_search_options(CLI::App* cmd, SearchCommand* opt) {
  cmd->add_option("job", opt->job, "job file: model, cluster, batch, precision (its parallel settings are a starting point)")
      ->required();
  cmd->add_option("--fix", opt->request.fix, "restrict a knob: key=value or key=v1,v2 (e.g. tensor_parallel_degree=8)");
  cmd->add_option("--set", opt->overrides, "override a job key before searching (e.g. nodes=16)");
  cmd->add_option("--top-k", opt->request.options.top_k, "candidates re-evaluated by the simulator")->check(count_in(1, 100000));
  cmd->add_option("--simulation-budget", opt->request.options.simulation_budget,
                  "most instructions one candidate's simulation may hold (folded); larger ones keep their estimate")
      ->capture_default_str()->check(number_in(1, 1e12));
  cmd->add_option("--workers", opt->request.options.workers, "simulations at once, and threads estimating (default: one per core)")->check(count_in(1, 1024));
  cmd->add_option("--show", opt->print.rows, "rows in the table of top candidates")->check(count_in(1, 100000));
  cmd->add_flag("--estimator-only", opt->request.estimator_only, "rank with the estimator alone");
  cmd->add_option("--memory-weight", opt->request.options.memory_weight,
                  "automated partitioning: 0 balances stage time only, 1 stage memory only")->check(number_in(0, 1));
  cmd->add_option("--memory-headroom", opt->request.options.memory_headroom,
                  "share of HBM every candidate must leave free (default 0.1; 0 accepts a peak at the HBM)")
      ->check(number_in(0, 0.9));
  cmd->add_flag("--no-partition", opt->request.uniform_stages, "keep uniform stages (no automated partitioning)");
  cmd->add_flag("--simulate-contrasts", opt->request.options.simulate_contrasts,
                "also simulate the best tensor-across-nodes and pipeline-across-nodes candidates");
  cmd->add_option("--explain", opt->request.explain,
                  "say why pruned candidates matching key=value filters were dropped (repeatable)");
  cmd->add_option("--write-job", opt->write_job, "write the winner as a job file");
  add_report_option(cmd, &opt->report);
  cmd->add_option("--slow", opt->slow, "rank under slow GPUs: simulate the candidates with simulate's --slow specs");
  cmd->add_option("--tokens", opt->print.budget.tokens, "token budget for time-to-train (e.g. 300e9)")->check(number_in(0, 1e18, true));
  cmd->add_option("--price-per-node-hour", opt->print.budget.on_demand_per_hour, "price of one node-hour for the cost estimate")
      ->check(number_in(0, 1e9, true));
  cmd->add_flag("--json", opt->print.json, "print one JSON object");
  add_execute_options(cmd, &opt->execute);
}

nlohmann::json run_search_command(const SearchCommand& opt) {
  // Under MPI every rank searches, each simulating a share (mpi_world.hpp); rank 0 prints and writes.
  const launch::MpiWorld world = launch::mpi_world();
  // The job's parallel: section is where the search starts: only the rules no layout mends apply.
  const Job base = load_job(opt.job, opt.overrides, JobRules::settings);
  if (opt.execute.candidates > 0 && ::access(launch::runner_path().c_str(), X_OK) != 0) {
    std::cerr << "partune: error: --execute needs the LibTorch backend (build/partune-run), and this build has none\n";
    throw Exit{2};
  }
  // Opened first: a --write-job or --report path that cannot be written fails before the search.
  std::optional<AtomicFile> job_file, page = open_report(world.prints() ? opt.report : "");
  if (!opt.write_job.empty() && world.prints()) job_file.emplace(opt.write_job);
  search::SearchRequest request = opt.request;
  for (const std::string& spec : opt.slow) request.options.slowdowns.push_back(slowdown_option(base, spec));
  if (world.size > 1) request.options.simulate_batch = launch::mpi_simulate_batch(world);
  else if (world.mpi) request.options.simulate_batch = launch::spawned_simulate_batch();
  const bool terminal = ::isatty(STDERR_FILENO) && !opt.print.json && world.prints();
  if (terminal) request.options.progress = progress_bar;
  const search::SearchReport report = search::run_search(base, opt.job, request);
  if (!world.prints()) return {};
  if (terminal) std::fprintf(stderr, "\r%80s\r", "");
  if (const std::string why = report::search_failure(base, report); !why.empty()) {
    std::cerr << why;
    throw Exit{3};
  }
  nlohmann::json execution;
  ExecuteOptions eo = opt.execute;
  eo.progress = ::isatty(STDERR_FILENO) != 0;
  try {
    if (eo.candidates > 0) execution = execute_candidates(report, eo);
  } catch (const std::runtime_error& e) {
    std::cerr << "partune: error: " << opt.job << ": " << e.what() << "\n";
    throw Exit{1};
  }
  const std::string execution_lines = execution.is_null() ? "" : execution_text(execution);
  std::cout << report::search_output(base, report, opt.print, opt.request.explain, execution, execution_lines);
  if (job_file) {
    job_file->write(job_yaml(report.ranked.front().job, opt.job));
    job_file->commit();
    if (!opt.print.json) std::cout << "wrote " << opt.write_job << "\n";
  }
  write_report(page, [&] { return report::search_html(base, report, opt.print.budget); });
  return execution;
}

}  // namespace

void register_search(CLI::App& app) {
  auto* cmd = app.add_subcommand("search", "Autotune: the fastest parallel configuration that fits");
  auto opt = std::make_shared<SearchCommand>();
  add_search_options(cmd, opt.get());
  cmd->footer(search::describe_legend() + "\n" + exit_status_help());
  cmd->callback([opt] { run_search_command(*opt); });
}

}  // namespace partune::cli
