// partune simulate JOB.yaml [--json] [--trace out.json] [--set k=v] [--no-symmetry]
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "partune/launch/chrome_trace.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "slow_option.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/units.hpp"
#include "partune/sim/simulator.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/report/report.hpp"
#include "report_file.hpp"

namespace partune::cli {

void register_simulate(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate", "Discrete-event simulation (SimGrid) of one training step");
  cmd->footer(std::string(report::simulation_terms()) + "\n" + exit_status_help());
  struct Options {
    std::string job, trace, report;
    std::vector<std::string> overrides, slow;
    bool json = false, no_symmetry = false, per_layer = false;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("job", opt->job, "job file (YAML)")->required();
  cmd->add_option("--set", opt->overrides, "override a job key, e.g. --set microbatches=16");
  cmd->add_option("--trace", opt->trace,
                  "write a Chrome trace-event file (Perfetto, chrome://tracing); with symmetry only the simulated "
                  "ranks appear: add --no-symmetry to trace every rank");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  add_report_option(cmd, &opt->report);
  cmd->add_flag("--no-symmetry", opt->no_symmetry, "simulate every rank even when replicas are identical");
  cmd->add_flag("--per-layer", opt->per_layer, "one instruction per layer (as the backend runs them)");
  cmd->add_option("--slow", opt->slow,
                  "slow GPUs (stragglers): node=N:FACTOR (a node's GPUs), rank=N:FACTOR, or jitter=SD (every GPU "
                  "1 + |z| SD times slower, z normal, drawn per rank); repeatable; every rank is then simulated");
  cmd->callback([opt] {
    const Job job = load_job(opt->job, opt->overrides);
    // Opened first: a trace or report path that cannot be written fails before the simulation.
    std::optional<AtomicFile> trace, page = open_report(opt->report);
    if (!opt->trace.empty()) trace.emplace(opt->trace);
    sim::SimOptions so;
    for (const std::string& spec : opt->slow) so.slowdowns.push_back(slowdown_option(job, spec));
    so.use_symmetry = !opt->no_symmetry;
    so.record_events = !opt->trace.empty() || !opt->report.empty();  // the report draws a timeline
    so.granularity = opt->per_layer ? Granularity::layer : Granularity::chunk;
    const sim::SimResult r = sim::simulate(job, so);
    if (trace) {
      launch::write_chrome_trace(*trace, r.events, job.cluster.instance.gpus_per_node);
      std::cerr << "wrote trace " << opt->trace << "\n";
    }
    // The estimator's figures came back with the simulation (from the costs it built).
    if (opt->json) std::cout << report::simulation_json(job, r, r.estimated).dump(2) << "\n";
    else std::cout << report::simulation_text(job, r, r.estimated);
    write_report(page, [&] { return report::simulation_html(job, r, r.estimated); });
  });
}

}  // namespace partune::cli
