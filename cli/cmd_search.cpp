// partune search JOB.yaml: the fastest configuration that fits, and why it wins.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "command_line.hpp"
#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/launch/mpi_world.hpp"
#include "progress.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/search/tuner.hpp"
#include "partune/launch/backend_process.hpp"
#include "report.hpp"
#include "search_execute.hpp"

namespace partune::cli {

namespace {

struct SearchCommand {
  std::string job, write_job;
  std::vector<std::string> fix, explain, overrides;
  int top_k = 32, workers = 0, show = 10;
  double memory_weight = 0.5;
  bool no_partition = false;
  bool json = false, estimator_only = false, simulate_contrasts = false;
  double tokens = 0, price_per_node_hour = 0;
  ExecuteOptions execute;  // --execute K: run candidates on the backend (0: not)
};

void add_search_options(CLI::App* cmd, SearchCommand* opt) {
  cmd->add_option("job", opt->job, "job file: model, cluster, batch, precision (its parallel settings are a starting point)")
      ->required();
  cmd->add_option("--fix", opt->fix, "restrict a knob: key=value or key=v1,v2 (e.g. tensor_parallel_degree=8)");
  cmd->add_option("--set", opt->overrides, "override a job key before searching (e.g. nodes=16)");
  cmd->add_option("--top-k", opt->top_k, "candidates re-evaluated by the simulator")->check(count_in(1, 100000));
  cmd->add_option("--workers", opt->workers, "simulations at once (default: one per core)")->check(count_in(1, 1024));
  cmd->add_option("--show", opt->show, "rows in the table of top candidates")->check(count_in(1, 100000));
  cmd->add_flag("--estimator-only", opt->estimator_only, "rank with the estimator alone");
  cmd->add_option("--memory-weight", opt->memory_weight,
                  "automated partitioning: 0 balances stage time only, 1 stage memory only")
      ->check(number_in(0, 1));
  cmd->add_flag("--no-partition", opt->no_partition, "keep uniform stages (no automated partitioning)");
  cmd->add_flag("--simulate-contrasts", opt->simulate_contrasts,
                "also simulate the best tensor-across-nodes and pipeline-across-nodes candidates");
  cmd->add_option("--explain", opt->explain,
                  "say why pruned candidates matching key=value filters were dropped (repeatable)");
  cmd->add_option("--write-job", opt->write_job, "write the winner as a job file");
  cmd->add_option("--tokens", opt->tokens, "token budget for time-to-train (e.g. 300e9)")->check(number_in(0, 1e18, true));
  cmd->add_option("--price-per-node-hour", opt->price_per_node_hour, "price of one node-hour for the cost estimate")
      ->check(number_in(0, 1e9, true));
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->add_option("--execute", opt->execute.candidates,
                  "run the top K candidates and K more from the rest of the ranking on the LibTorch backend, "
                  "and compare the measured ranking with the predicted one (Kendall's tau, regret)")
      ->check(count_in(1, 1000));
  cmd->add_option("--execute-repeats", opt->execute.repeats, "with --execute: interleaved runs of each candidate")
      ->capture_default_str()
      ->check(count_in(1, 100));
  cmd->add_option("--execute-steps", opt->execute.steps, "with --execute: steps per run, 2 warm-up steps included")
      ->capture_default_str()
      ->check(count_in(3, 10000));
}

// The job's own search restrictions, then --fix; a bad one names where it came from.
search::SearchSpace restricted_space(const Job& base, const SearchCommand& opt) {
  search::SearchSpace space;
  for (const auto& f : base.search_restrictions) {
    try {
      search::restrict_space(space, f);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError(opt.job, "search", e.what());
    }
  }
  for (const auto& f : opt.fix) {
    try {
      search::restrict_space(space, f);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError("--fix", f, e.what());
    }
  }
  return space;
}

void print_search_report(const Job& base, const search::SearchReport& report, const SearchCommand& opt,
                         const nlohmann::json& execution) {
  if (report.ranked.empty() && report.estimated == 0) {
    std::cerr << "partune: no legal configuration in this space (" << report.enumerated
              << " combinations, all rejected by the job rules: check --fix and the degrees' divisibility)\n";
    throw Exit{3};
  }
  if (report.ranked.empty()) {
    std::cerr << "partune: no configuration fits. Why some were dropped:\n";
    for (const auto& c : report.rejected) std::cerr << "  " << search::describe(c.job) << ": " << c.rejection << "\n";
    for (const auto& line : search::explain(report, base, {}, 10)) std::cerr << "  " << line << "\n";
    throw Exit{3};
  }
  TrainingBudget budget{opt.tokens, opt.price_per_node_hour};
  if (opt.json) {
    nlohmann::json j = search_json(base, report, budget);
    j["rejected_by_simulator"] = nlohmann::json::array();
    for (const auto& c : report.rejected)
      j["rejected_by_simulator"].push_back({{"configuration", search::describe(c.job)}, {"reason", c.rejection}});
    if (!execution.is_null()) j["execution"] = execution;
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << search_text(base, report, budget, opt.show);
    if (!report.rejected.empty()) std::cout << "\nruled out by the simulator (not the winner):\n";
    for (const auto& c : report.rejected) std::cout << "  " << search::describe(c.job) << ": " << c.rejection << "\n";
    if (!execution.is_null()) std::cout << execution_text(execution);
  }
  if (!opt.explain.empty()) {
    std::cout << "\nwhy candidates matching " << fmt::format("{}", fmt::join(opt.explain, " ")) << " were dropped:\n";
    for (const auto& line : search::explain(report, base, opt.explain)) std::cout << "  " << line << "\n";
  }
}

nlohmann::json run_search_command(const SearchCommand& opt) {
  // Under MPI every rank runs the search; the simulations are split over the ranks and
  // every rank gets every outcome (mpi_world.hpp); rank 0 prints and writes.
  const launch::MpiWorld world = launch::mpi_world();
  const Job base = load_job(opt.job, opt.overrides);
  if (opt.execute.candidates > 0 && ::access(launch::runner_path().c_str(), X_OK) != 0) {
    std::cerr << "partune: error: --execute needs the LibTorch backend (build/partune-run), and this build has none\n";
    throw Exit{2};
  }
  // Opened first: a --write-job path that cannot be written fails before the search.
  std::optional<AtomicFile> job_file;
  if (!opt.write_job.empty() && world.prints()) job_file.emplace(opt.write_job);
  const search::SearchSpace space = restricted_space(base, opt);
  search::SearchOptions so;
  so.top_k = opt.top_k;
  so.workers = opt.workers;
  so.simulate = !opt.estimator_only;
  so.auto_partition = !opt.no_partition;
  so.memory_weight = opt.memory_weight;
  // Validate --explain filters before the (long) search, not after printing the report.
  for (const auto& f : opt.explain) {
    search::SearchSpace probe;
    try {
      search::restrict_space(probe, f);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError("--explain", f, e.what());
    }
  }
  so.simulate_contrasts = opt.simulate_contrasts;
  if (world.size > 1) so.simulate_batch = launch::mpi_simulate_batch(world);
  else if (world.mpi) so.simulate_batch = launch::spawned_simulate_batch();
  const bool terminal = ::isatty(STDERR_FILENO) && !opt.json && world.prints();
  if (terminal) so.progress = progress_bar;
  const search::SearchReport report = search::run_search(base, space, so);
  if (!world.prints()) return {};
  if (terminal) std::fprintf(stderr, "\r%80s\r", "");
  nlohmann::json execution;
  if (opt.execute.candidates > 0 && !report.ranked.empty()) {
    ExecuteOptions eo = opt.execute;
    eo.progress = ::isatty(STDERR_FILENO) != 0;
    try {
      execution = execute_candidates(report, eo);
    } catch (const std::runtime_error& e) {
      std::cerr << "partune: error: " << opt.job << ": " << e.what() << "\n";
      throw Exit{1};
    }
  }
  print_search_report(base, report, opt, execution);
  if (job_file) {
    job_file->write(job_yaml(report.ranked.front().job, opt.job));
    job_file->commit();
    if (!opt.json) std::cout << "wrote " << opt.write_job << "\n";
  }
  return execution;
}

}  // namespace

nlohmann::json search_and_execute(const std::string& job, const std::vector<std::string>& overrides,
                                  const ExecuteOptions& execute, bool json) {
  SearchCommand opt;
  opt.job = job;
  opt.overrides = overrides;
  opt.execute = execute;
  opt.json = json;
  return run_search_command(opt);
}

void register_search(CLI::App& app) {
  auto* cmd = app.add_subcommand("search", "Autotune: the fastest parallel configuration that fits");
  auto opt = std::make_shared<SearchCommand>();
  add_search_options(cmd, opt.get());
  cmd->footer(search::describe_legend() + "\n" + exit_status_help());
  cmd->callback([opt] { run_search_command(*opt); });
}

}  // namespace partune::cli
