// partune bench simulate [JOB] [--no-symmetry] [--max-gpus N]: simulator wall time,
// activities per second and peak memory from 8 to 65,536 GPUs (docs/performance.md).
#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

namespace partune::cli {

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

}  // namespace partune::cli
