// partune reproduce [PATH...] [--json | --markdown | --corpus | --check]: predicted vs published for every
// table row; --corpus reads scenarios/corpus/ and summarises it; --check only loads the files.
#include <iostream>

#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/table.hpp"
#include "partune/search/published.hpp"
#include "partune/sim/simulator.hpp"
#include "partune/report/report.hpp"
#include "reproduce_report.hpp"

namespace partune::cli {

void register_reproduce(CLI::App& app) {
  auto* cmd = app.add_subcommand("reproduce", "Predict every row of published tables and report the error");
  struct Options {
    std::vector<std::string> paths;
    bool json = false, markdown = false, estimator = false, search = false, corpus = false, check = false;
    int top_k = 8;
    std::vector<std::string> explain;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("paths", opt->paths, "table files or folders (default: scenarios/tables/, with --corpus scenarios/corpus/)");
  auto* json = cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->add_flag("--estimator", opt->estimator, "use the analytical estimator (fast) instead of the simulator");
  auto* search = cmd->add_flag("--search", opt->search,
                               "for each row, search the same model/cluster/batch and compare the configuration "
                               "found with the published one");
  cmd->add_flag("--markdown", opt->markdown,
                "print a Markdown table (each row off by more than 10% with its known_gap) and the MAPE lines")
      ->excludes(json)
      ->excludes(search);
  auto* corpus = cmd->add_flag("--corpus", opt->corpus,
                                "the corpus of published runs (scenarios/corpus/): every row with its GPU and parallel "
                                "kind, then MAPE, median and signed error, shares within 10/15/20% and rows predicted "
                                "not to fit, per source, GPU generation and parallel kind")
                    ->excludes(search);
  cmd->add_flag("--check", opt->check,
                "load and validate the table files and print their row counts; predicts nothing (for writing rows "
                "before their predictions are looked at)")
      ->excludes(search)
      ->excludes(corpus)
      ->excludes(json);
  cmd->add_option("--top-k", opt->top_k, "with --search: candidates simulated per row")->check(count_in(1, 100000));
  cmd->add_option("--explain", opt->explain, "print the full estimate of the named row(s) first");
  cmd->callback([opt] {
    std::vector<std::string> paths = opt->paths;
    if (paths.empty()) paths.push_back(scenario_root() + (opt->corpus ? "/corpus" : "/tables"));
    const std::vector<Table> tables = load_tables(paths);
    if (opt->check) {
      std::size_t rows = 0;
      for (const Table& t : tables) {
        std::cout << t.file << ": " << t.rows.size() << " rows\n";
        rows += t.rows.size();
      }
      std::cout << tables.size() << " tables, " << rows << " rows, all valid\n";
      return;
    }
    if (opt->search) {
      search::SearchOptions so;
      so.simulate = !opt->estimator;
      so.top_k = opt->top_k;
      const auto rows = search::compare_with_published(tables, so);
      if (opt->json) std::cout << report::published_comparison_json(rows).dump(2) << "\n";
      else std::cout << report::published_comparison_text(rows);
      for (const auto& r : rows)
        if (r.comparable() && !r.found_at_least_as_fast()) throw Exit{1};  // a result the user asked about
      return;
    }
    JobEvaluator evaluate = [](const Job& j) { return sim::simulate(j).metrics; };
    if (opt->estimator) evaluate = [](const Job& j) { return estimate(j); };
    for (const Table& t : tables)
      for (const TableRow& row : t.rows)
        for (const std::string& name : opt->explain)
          if (name == row.name) {
            std::cout << "== " << t.name << " / " << row.name << "\n" << report::estimate_text(row.job, evaluate(row.job));
            if (row.has_baseline)
              std::cout << "-- baseline\n" << report::estimate_text(row.baseline, evaluate(row.baseline));
            std::cout << "\n";
          }
    const ReproduceResult r = reproduce(tables, evaluate);
    if (opt->corpus && opt->json) std::cout << report::corpus_json(r).dump(2) << "\n";
    else if (opt->corpus && opt->markdown) std::cout << report::corpus_markdown(r);
    else if (opt->corpus) std::cout << report::corpus_text(r);
    else if (opt->json) std::cout << report::reproduce_json(r).dump(2) << "\n";
    else if (opt->markdown) std::cout << reproduce_markdown(r, opt->estimator ? "estimator" : "simulator");
    else std::cout << report::reproduce_text(r);
  });
}

}  // namespace partune::cli
