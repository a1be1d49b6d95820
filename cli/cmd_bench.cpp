// partune bench estimate [JOB] [--seconds S]: estimator evaluations per second, one core.
#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/search/tuner.hpp"

namespace partune::cli {

namespace {

// partune bench estimate: estimator evaluations per second on one core.
void register_bench_estimate(CLI::App* bench) {
  auto* est = bench->add_subcommand("estimate", "Estimator evaluations per second on one core");
  struct Options { std::string job = scenario_root() + "/jobs/gpt3-175b-p4d-120.yaml"; double seconds = 2.0; };
  auto opt = std::make_shared<Options>();
  est->add_option("job", opt->job, "job file (default: the 175B job on 120 p4d)");
  est->add_option("--seconds", opt->seconds, "how long to measure, in seconds")->check(number_in(0, 3600, true));
  est->callback([opt] {
    using clock = std::chrono::steady_clock;
    const Job job = load_job(opt->job);
    double sink = 0;
    long evaluations = 0;
    const auto start = clock::now();
    const auto stop = start + std::chrono::duration<double>(opt->seconds);
    while (clock::now() < stop) {
      for (int i = 0; i < 1000; ++i) sink += estimate(job).step_time;  // one clock read per 1000
      evaluations += 1000;
    }
    const double wall = std::chrono::duration<double>(clock::now() - start).count();
    std::cout << fmt::format("bench estimate: {} ({} GPUs)\n", job.name, job.world_size());
    std::cout << fmt::format("  evaluations        {}\n  wall time          {:.3f} s\n", evaluations, wall);
    std::cout << fmt::format("  evaluations/s      {:.0f}  (target >= 200000 on one core)\n", evaluations / wall);
    std::cout << fmt::format("  time/evaluation    {:.2f} us\n", 1e6 * wall / evaluations);
    if (sink < 0) std::cout << "";  // keeps the loop's work observable
  });
}

// partune bench search: autotuner wall time over the full space.
void register_bench_search(CLI::App* bench) {
  auto* search_cmd = bench->add_subcommand("search", "Autotuner wall time over the full space, tier by tier");
  struct SearchBenchOptions { std::string job = scenario_root() + "/jobs/gpt3-175b-p4d-120.yaml"; int top_k = 32; };
  auto qopt = std::make_shared<SearchBenchOptions>();
  search_cmd->add_option("job", qopt->job, "job to tune (default: GPT-3 175B on 120 p4d)");
  search_cmd->add_option("--top-k", qopt->top_k, "candidates simulated")->check(count_in(1, 100000));
  search_cmd->callback([qopt] {
    const Job job = load_job(qopt->job);
    search::SearchOptions so;
    so.top_k = qopt->top_k;
    const auto start = std::chrono::steady_clock::now();
    const search::SearchReport r = search::run_search(job, search::SearchSpace{}, so);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << fmt::format("bench search: {} ({} GPUs), the full space\n", job.name, job.world_size());
    std::cout << fmt::format("  enumerated         {}\n  invalid            {}\n  duplicate placements {}\n", r.enumerated,
                             r.invalid, r.duplicates);
    std::cout << fmt::format("  estimated          {}  ({:.2f} s)\n", r.estimated, r.estimate_seconds);
    std::cout << fmt::format("  pruned: memory     {}\n  pruned: dominated  {}\n", r.pruned_memory, r.pruned_dominated);
    std::cout << fmt::format("  simulated          {}  ({:.2f} s)\n", r.simulated, r.simulate_seconds);
    std::cout << fmt::format("  wall time          {:.2f} s  (target <= 30 s on a 2-core machine)\n", wall);
  });
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Speed benchmarks (figures, not pass/fail tests)");
  register_bench_run(bench);
  bench->require_subcommand(1);
  register_bench_estimate(bench);
  register_bench_simulate(bench);
  register_bench_search(bench);
  register_bench_collectives(bench);
  // Listed for --help; it runs in build/partune-run (main.cpp), which has LibTorch.
  bench->add_subcommand("attention", "Standard attention vs FlashAttention: time and peak memory by sequence length "
                                     "(partune bench attention --help)")
      ->allow_extras();
}

}  // namespace partune::cli
