// partune bench collectives --compare [DIR] [--json]: the cost model's collective times
// against published nccl-tests measurements (scenarios/measurements/collectives/,
// docs/collectives.md): a table per file, a summary per fabric. A report: exits 0.
#include <iostream>

#include "commands.hpp"
#include "partune/costmodel/collective_comparison.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/report/collective_report.hpp"

namespace partune::cli {

void register_bench_collectives(CLI::App* bench) {
  auto* cmd = bench->add_subcommand("collectives", "Collective times: the cost model against measured nccl-tests curves");
  struct Options {
    std::string dir = scenario_root() + "/measurements/collectives";
    bool compare = false, json = false;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_flag("--compare", opt->compare, "predict every measured point and print measured vs predicted")->required();
  cmd->add_option("dir", opt->dir, "a measurement file or folder (default: scenarios/measurements/collectives/)");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] {
    const CollectiveComparison c = compare_collectives(load_measurements(opt->dir));
    if (opt->json) std::cout << report::collective_comparison_json(c).dump(2) << "\n";
    else std::cout << report::collective_comparison_text(c);
  });
}

}  // namespace partune::cli
