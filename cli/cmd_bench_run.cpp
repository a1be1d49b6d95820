// partune bench run [JOB] [--steps N] [--warmup K] [--scale-* ...]: the backend's
// data-parallel overhead. A data-parallel world of N ranks (`partune run --nproc N`)
// against N independent one-rank runs of the same per-rank work (1/N of the batch each,
// all N at once, the same threads per rank): the world's samples/s over the sum of
// theirs. Target: at least 90% for a world of 2 on a 2-core machine.
//
// It starts build/partune-run processes and reads their --json reports, so this binary
// stays free of LibTorch.
#include <algorithm>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend_process.hpp"
#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/quantile.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/validation.hpp"

namespace partune::cli {

namespace {

// Samples/s of a run: that of its 20th-percentile step time after the warm-up (the
// statistic of validate and calibrate, costmodel/quantile.hpp): the 80th percentile of
// the steps' samples/s.
double run_samples_per_s(const nlohmann::json& report, int warmup) {
  std::vector<double> v;
  const auto& steps = report.at("steps");
  for (std::size_t i = static_cast<std::size_t>(warmup); i < steps.size(); ++i)
    v.push_back(steps[i].at("samples_per_s").get<double>());
  if (v.empty()) throw std::runtime_error("bench run: no step after the warm-up (raise --steps)");
  return quantile(v, 1.0 - kLowQuantile);
}

struct Options {
  std::string job = "scenarios/jobs/gpt2-small-local-cpu.yaml";
  int steps = 8, warmup = 2, rounds = 3;
  int layers = 4, hidden = 256, heads = 4, seq = 128, vocab = 256;
  std::vector<std::string> overrides;
};
// N one-rank runs at once against the world of N, --rounds times alternating; prints
// each round and the medians.
void bench_run(const Options& opt) {
  const Job job = load_job(opt.job, opt.overrides);
  const int n = job.world_size();
  if (job.parallel.pipeline_parallel_degree != 1 || job.parallel.tensor_parallel_degree != 1 ||
      job.parallel.sharded_data_parallel_degree != 1 || n < 2) {
    std::cerr << fmt::format("partune: error: {}: bench run needs a data-parallel job of 2 or more ranks "
                             "(pipeline, tensor and sharded degree 1); this one has world {} (pipeline {} x tensor {})\n",
                             opt.job, n, job.parallel.pipeline_parallel_degree, job.parallel.tensor_parallel_degree);
    throw Exit{2};
  }
  if (job.training.global_batch % n != 0) {
    std::cerr << fmt::format("partune: error: {}: training.global_batch {} does not split over {} ranks\n", opt.job,
                             job.training.global_batch, n);
    throw Exit{2};
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = std::max(1, static_cast<int>(cores) / n);
  const std::string common = fmt::format(
      "{} run {} --json --steps {} --threads {} --scale-layers {} --scale-hidden {} --scale-heads {} --scale-seq {} "
      "--scale-vocab {}",
      shell_quoted(runner_path()), shell_quoted(opt.job), opt.steps, threads, opt.layers, opt.hidden, opt.heads, opt.seq,
      opt.vocab);
  std::string sets;
  for (const std::string& o : opt.overrides) sets += " --set " + shell_quoted(o);
  const std::string common_sets = common + sets;
  // The same per-rank work alone: one rank, 1/N of the batch, N of them at once.
  const std::string single = common_sets + fmt::format(" --set nodes=1 --set {} --set global_batch={}",
                                                  shell_quoted(fmt::format("instance_type={{base: {}, gpus_per_node: 1}}",
                                                                     job.cluster.instance.name)),
                                                  job.training.global_batch / n);
  std::cout << fmt::format("bench run: {} ({}), data parallel {} vs {} independent one-rank runs, {} thread{} per rank\n",
                           job.name, job.model.name, n, n, threads, threads == 1 ? "" : "s")
            << std::flush;
  // Rounds alternate so that a slow spell of a shared machine hits both sides alike.
  std::vector<double> alone_sums, worlds, slowest_alone;
  nlohmann::json report;
  for (int round = 1; round <= opt.rounds; ++round) {
    std::vector<std::unique_ptr<BackendProcess>> alone;
    for (int i = 0; i < n; ++i) alone.push_back(std::make_unique<BackendProcess>(single));
    double alone_sum = 0, slowest = std::numeric_limits<double>::infinity();
    std::string each;
    for (int i = 0; i < n; ++i) {
      const double sps = run_samples_per_s(alone[static_cast<std::size_t>(i)]->report(), opt.warmup);
      each += fmt::format("{}{:.2f}", i ? " + " : "", sps);
      alone_sum += sps;
      slowest = std::min(slowest, sps);
    }
    slowest_alone.push_back(slowest);
    BackendProcess world(common_sets + fmt::format(" --nproc {}", n));
    report = world.report();
    const double together = run_samples_per_s(report, opt.warmup);
    std::cout << fmt::format("  round {}: alone {} = {:.2f} samples/s; world of {} {:.2f} samples/s ({:.1f}%)\n", round,
                             each, alone_sum, n, together, 100.0 * together / alone_sum)
              << std::flush;
    alone_sums.push_back(alone_sum);
    worlds.push_back(together);
  }
  using sim::median;
  const double alone_sum = median(alone_sums), together = median(worlds);
  // The efficiency of each round (world over its own round's alone): their spread says
  // how much one round can be trusted.
  std::vector<double> efficiency;
  for (std::size_t r = 0; r < worlds.size(); ++r) efficiency.push_back(100.0 * worlds[r] / alone_sums[r]);
  const auto [low, high] = std::minmax_element(efficiency.begin(), efficiency.end());
  const auto& m = report.at("model");
  std::cout << fmt::format("  sum of the {} alone       {:>10.2f} samples/s\n", n, alone_sum);
  std::cout << fmt::format("  data-parallel world of {} {:>10.2f} samples/s\n", n, together);
  std::cout << fmt::format("  efficiency             {:>10.1f} %   (medians over {} rounds; rounds {:.1f}..{:.1f}%; "
                           "target >= 90% for a world of 2 on a 2-core machine)\n",
                           100.0 * together / alone_sum, opt.rounds, *low, *high);
  // Data parallelism is synchronous: each step waits for the slowest replica. When the
  // cores do not deliver the same speed (a shared VM), even free communication gives
  // n x the slowest; against that bound the rest is the backend's own overhead.
  const double bound = n * median(slowest_alone);
  std::cout << fmt::format("  lockstep bound         {:>10.2f} samples/s   ({} x the slowest alone; the world reaches "
                           "{:.1f}% of it)\n",
                           bound, n, 100.0 * together / bound);
  std::cout << fmt::format("model run: {} layers, hidden {}, seq {}, vocab {}; {} sequences per step; each run: the 20th-percentile "
                           "step of steps {}..{}\n",
                           m.at("layers").get<int>(), m.at("hidden").get<int>(), m.at("seq_len").get<int>(),
                           m.at("vocab").get<int>(), job.training.global_batch, opt.warmup + 1, opt.steps);
}

}  // namespace

void register_bench_run(CLI::App* bench) {
  auto* cmd = bench->add_subcommand(
      "run", "Data-parallel overhead of the LibTorch backend: a world of N against N independent one-rank runs");
  auto opt = std::make_shared<Options>();
  cmd->add_option("job", opt->job, "a data-parallel job (pipeline, tensor and sharded degree 1)")->capture_default_str();
  cmd->add_option("--steps", opt->steps, "steps per run")->capture_default_str()->check(count_in(1, 100000));
  cmd->add_option("--rounds", opt->rounds, "alternating rounds (alone, then the world); medians over them")
      ->capture_default_str()
      ->check(count_in(1, 1000));
  cmd->add_option("--warmup", opt->warmup, "first steps left out of each run's figure")->capture_default_str()->check(count_in(0, 100000));
  cmd->add_option("--set", opt->overrides, "override a job key for every run, e.g. --set microbatches=4");
  cmd->add_option("--scale-layers", opt->layers, "model run: layers")->capture_default_str()->check(count_in(1, 1000000));
  cmd->add_option("--scale-hidden", opt->hidden, "model run: hidden size")->capture_default_str()->check(count_in(1, 1000000));
  cmd->add_option("--scale-heads", opt->heads, "model run: heads")->capture_default_str()->check(count_in(1, 1000000));
  cmd->add_option("--scale-seq", opt->seq, "model run: sequence length")->capture_default_str()->check(count_in(1, 1000000));
  cmd->add_option("--scale-vocab", opt->vocab, "model run: vocabulary")->capture_default_str()->check(count_in(1, 1000000));
  cmd->callback([opt] { bench_run(*opt); });
}

}  // namespace partune::cli
