// partune reproduce [PATH...] [--json]: predicted vs published for every table row.
#include <iostream>

#include "commands.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/table.hpp"
#include "report.hpp"

namespace partune::cli {

void register_reproduce(CLI::App& app) {
  auto* cmd = app.add_subcommand("reproduce", "Predict every row of published tables and report the error");
  struct Options {
    std::vector<std::string> paths;
    bool json = false;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("paths", opt->paths, "table files or folders (default: scenarios/tables/)");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] {
    std::vector<std::string> paths = opt->paths;
    if (paths.empty()) paths.push_back(scenario_root() + "/tables");
    const std::vector<Table> tables = load_tables(paths);
    const ReproduceResult r = reproduce(tables, [](const Job& j) { return estimate(j); });
    if (opt->json) std::cout << reproduce_json(r).dump(2) << "\n";
    else std::cout << reproduce_text(r);
  });
}

}  // namespace partune::cli
