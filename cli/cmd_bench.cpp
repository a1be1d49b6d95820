// partune bench estimate [JOB] [--seconds S]: estimator evaluations per second, one core.
#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/search/tuner.hpp"
#include "partune/sim/simulator.hpp"

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

// partune bench simulate: simulator wall time and peak memory at several scales of GPT-3 175B.
void register_bench_simulate(CLI::App* bench) {
  auto* sim_cmd = bench->add_subcommand("simulate", "Simulator wall time, activities per second and peak memory at several scales");
  struct SimBenchOptions { std::string job = scenario_root() + "/jobs/gpt3-175b-p4d-120.yaml"; bool no_symmetry = false; int max_gpus = 65536; };
  auto sopt = std::make_shared<SimBenchOptions>();
  sim_cmd->add_option("job", sopt->job, "base job (default: GPT-3 175B on p4d); resized per row");
  sim_cmd->add_flag("--no-symmetry", sopt->no_symmetry, "simulate every rank");
  sim_cmd->add_option("--max-gpus", sopt->max_gpus, "largest row (default 65536)")->check(count_in(8, 1 << 20));
  sim_cmd->callback([sopt] {
    // GPT-3 175B with TP 8 inside nodes, resized to each GPU count: the row for 960 GPUs
    // is the seed's 120-node job (PP 8, DP 15, 64 micro-batches of 2 sequences).
    struct Scale { int gpus, pp, microbatches, batch; };
    const Scale scales[] = {{8, 1, 8, 8},           {64, 8, 64, 64},          {960, 8, 64, 1920},
                            {3072, 8, 64, 6144},    {8192, 8, 64, 16384},     {16384, 8, 64, 32768},
                            {65536, 8, 64, 131072}};
    load_job(sopt->job);  // a bad base job fails before anything is printed
    std::cout << fmt::format("bench simulate: {} (one training step per row{})\n", sopt->job,
                             sopt->no_symmetry ? ", every rank simulated" : "");
    std::cout << fmt::format("{:>6} {:>5} {:>5} {:>5} {:>9} {:>12} {:>10} {:>14} {:>10} {:>12}\n", "GPUs", "pp", "tp",
                             "dp", "simulated", "activities", "wall s", "activities/s", "peak MiB", "step s");
    for (const Scale& sc : scales) {
      if (sc.gpus > sopt->max_gpus) break;
      const Job job = load_job(sopt->job, {"nodes=" + std::to_string(sc.gpus / 8),
                                           "pipeline_parallel_degree=" + std::to_string(sc.pp),
                                           "tensor_parallel_degree=8", "microbatches=" + std::to_string(sc.microbatches),
                                           "global_batch=" + std::to_string(sc.batch), "gradient_accumulation=1"});
      sim::SimOptions so;
      so.use_symmetry = !sopt->no_symmetry;
      const auto start = std::chrono::steady_clock::now();
      const sim::SimResult r = sim::simulate(job, so);
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::cout << fmt::format("{:>6} {:>5} {:>5} {:>5} {:>9} {:>12} {:>10.3f} {:>14.0f} {:>10.0f} {:>12.3f}\n", sc.gpus,
                               sc.pp, 8, job.data_parallel_degree(), r.ranks.size(), r.activities, wall,
                               r.activities / wall, r.peak_process_bytes / (1 << 20), r.metrics.step_time)
                << std::flush;
    }
    std::cout << "targets: the 960-GPU row in <= 2 s with symmetry; every rank: 16,384 GPUs in <= 60 s and 4 GiB, "
                 "65,536 in <= 10 min and 16 GiB (docs/performance.md)\n";
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
  // Listed for --help; it runs in build/partune-run (main.cpp), which has LibTorch.
  bench->add_subcommand("attention", "Standard attention vs FlashAttention: time and peak memory by sequence length "
                                     "(partune bench attention --help)")
      ->allow_extras();
}

}  // namespace partune::cli
