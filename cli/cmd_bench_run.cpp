// partune bench run [JOB] [--steps N] [--warmup K] [--scale-* ...]: the backend's
// data-parallel overhead, a world of N ranks against N independent one-rank runs
// (validate/data_parallel_overhead.hpp). It starts build/partune-run processes and reads
// their --json reports, so this binary stays free of LibTorch.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/validate/data_parallel_overhead.hpp"

namespace partune::cli {

namespace {

void print_round(int round, int ranks, const validate::OverheadRound& r) {
  std::string each;
  for (std::size_t i = 0; i < r.alone.size(); ++i) each += fmt::format("{}{:.2f}", i ? " + " : "", r.alone[i]);
  std::cout << fmt::format("  round {}: alone {} = {:.2f} samples/s; world of {} {:.2f} samples/s ({:.1f}%)\n", round,
                           each, r.alone_sum, ranks, r.world, 100.0 * r.world / r.alone_sum)
            << std::flush;
}

void print_overhead(const Job& job, const validate::OverheadPlan& plan, const validate::OverheadOptions& opt,
                    const validate::DataParallelOverhead& o) {
  const int n = plan.ranks;
  const auto& m = o.model;
  std::cout << fmt::format("  sum of the {} alone       {:>10.2f} samples/s\n", n, o.alone_sum);
  std::cout << fmt::format("  data-parallel world of {} {:>10.2f} samples/s\n", n, o.world);
  std::cout << fmt::format("  efficiency             {:>10.1f} %   (medians over {} rounds; rounds {:.1f}..{:.1f}%; "
                           "target >= 90% for a world of 2 on a 2-core machine)\n",
                           o.efficiency_pct, opt.rounds, o.lowest_round_pct, o.highest_round_pct);
  std::cout << fmt::format("  lockstep bound         {:>10.2f} samples/s   ({} x the slowest alone; the world reaches "
                           "{:.1f}% of it)\n",
                           o.lockstep_bound, n, 100.0 * o.world / o.lockstep_bound);
  std::cout << fmt::format("model run: {} layers, hidden {}, seq {}, vocab {}; {} sequences per step; each run: the 20th-percentile "
                           "step of steps {}..{}\n",
                           m.at("layers").get<int>(), m.at("hidden").get<int>(), m.at("seq_len").get<int>(),
                           m.at("vocab").get<int>(), job.training.global_batch, opt.warmup + 1, opt.steps);
}

void bench_run(const validate::OverheadOptions& opt) {
  const Job job = load_job(opt.job_file, opt.overrides);
  if (const std::string why = validate::why_not_data_parallel(job, opt.job_file); !why.empty()) {
    std::cerr << "partune: error: " << why << "\n";
    throw Exit{2};
  }
  const validate::OverheadPlan plan = validate::plan_overhead(job, opt);
  std::cout << fmt::format("bench run: {} ({}), data parallel {} vs {} independent one-rank runs, {} thread{} per rank\n",
                           job.name, job.model.name, plan.ranks, plan.ranks, plan.threads, plan.threads == 1 ? "" : "s")
            << std::flush;
  const validate::DataParallelOverhead o = validate::measure_overhead(
      plan, opt, [&](int round, const validate::OverheadRound& r) { print_round(round, plan.ranks, r); });
  print_overhead(job, plan, opt, o);
}

}  // namespace

void register_bench_run(CLI::App* bench) {
  auto* cmd = bench->add_subcommand(
      "run", "Data-parallel overhead of the LibTorch backend: a world of N against N independent one-rank runs");
  auto opt = std::make_shared<validate::OverheadOptions>();
  opt->job_file = "scenarios/jobs/gpt2-small-local-cpu.yaml";
  cmd->add_option("job", opt->job_file, "a data-parallel job (pipeline, tensor and sharded degree 1)")->capture_default_str();
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
