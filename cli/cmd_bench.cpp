// partune bench estimate [JOB] [--seconds S]: estimator evaluations per second, one core.
#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"

namespace partune::cli {

void register_bench(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Speed benchmarks (figures, not pass/fail tests)");
  bench->require_subcommand(1);
  auto* est = bench->add_subcommand("estimate", "Estimator evaluations per second on one core");
  struct Options {
    std::string job = scenario_root() + "/jobs/gpt3-175b-p4d-120.yaml";
    double seconds = 2.0;
  };
  auto opt = std::make_shared<Options>();
  est->add_option("job", opt->job, "job file (default: the 175B job on 120 p4d)");
  est->add_option("--seconds", opt->seconds, "how long to measure")->check(CLI::PositiveNumber);
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

}  // namespace partune::cli
