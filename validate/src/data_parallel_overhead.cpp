// The backend's data-parallel overhead (data_parallel_overhead.hpp).
#include "partune/validate/data_parallel_overhead.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "partune/costmodel/quantile.hpp"
#include "partune/launch/backend_process.hpp"
#include "partune/validate/validation.hpp"

namespace partune::validate {

namespace {

using launch::BackendProcess;
using launch::shell_quoted;

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

// The N runs alone, all at once, then the world of N.
OverheadRound run_round(const OverheadPlan& plan, const OverheadOptions& opt, nlohmann::json& report) {
  std::vector<std::unique_ptr<BackendProcess>> alone;
  for (int i = 0; i < plan.ranks; ++i) alone.push_back(std::make_unique<BackendProcess>(plan.alone_command));
  OverheadRound r;
  r.slowest_alone = std::numeric_limits<double>::infinity();
  for (const auto& run : alone) {
    r.alone.push_back(run_samples_per_s(run->report(), opt.warmup));
    r.alone_sum += r.alone.back();
    r.slowest_alone = std::min(r.slowest_alone, r.alone.back());
  }
  BackendProcess world(plan.world_command);
  report = world.report();
  r.world = run_samples_per_s(report, opt.warmup);
  return r;
}

}  // namespace

std::string why_not_data_parallel(const Job& job, const std::string& file) {
  const int n = job.world_size();
  if (job.parallel.pipeline_parallel_degree != 1 || job.parallel.tensor_parallel_degree != 1 ||
      job.parallel.sharded_data_parallel_degree != 1 || n < 2)
    return fmt::format("{}: bench run needs a data-parallel job of 2 or more ranks (pipeline, tensor and sharded "
                       "degree 1); this one has world {} (pipeline {} x tensor {})",
                       file, n, job.parallel.pipeline_parallel_degree, job.parallel.tensor_parallel_degree);
  if (job.training.global_batch % n != 0)
    return fmt::format("{}: training.global_batch {} does not split over {} ranks", file, job.training.global_batch, n);
  return "";
}

OverheadPlan plan_overhead(const Job& job, const OverheadOptions& opt) {
  OverheadPlan p;
  p.ranks = job.world_size();
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  p.threads = std::max(1, static_cast<int>(cores) / p.ranks);
  std::string common = fmt::format(
      "{} run {} --json --steps {} --threads {} --scale-layers {} --scale-hidden {} --scale-heads {} --scale-seq {} "
      "--scale-vocab {}",
      shell_quoted(launch::runner_path()), shell_quoted(opt.job_file), opt.steps, p.threads, opt.layers, opt.hidden,
      opt.heads, opt.seq, opt.vocab);
  for (const std::string& o : opt.overrides) common += " --set " + shell_quoted(o);
  p.world_command = common + fmt::format(" --nproc {}", p.ranks);
  // The same per-rank work alone: one rank, 1/N of the batch.
  p.alone_command = common + fmt::format(" --set nodes=1 --set {} --set global_batch={}",
                                         shell_quoted(fmt::format("instance_type={{base: {}, gpus_per_node: 1}}",
                                                                  job.cluster.instance.name)),
                                         job.training.global_batch / p.ranks);
  return p;
}

DataParallelOverhead measure_overhead(const OverheadPlan& plan, const OverheadOptions& opt,
                                      const std::function<void(int round, const OverheadRound&)>& on_round) {
  DataParallelOverhead out;
  std::vector<double> alone_sums, worlds, slowest, efficiency;
  nlohmann::json report;
  for (int round = 1; round <= opt.rounds; ++round) {
    out.rounds.push_back(run_round(plan, opt, report));
    const OverheadRound& r = out.rounds.back();
    if (on_round) on_round(round, r);
    alone_sums.push_back(r.alone_sum);
    worlds.push_back(r.world);
    slowest.push_back(r.slowest_alone);
    efficiency.push_back(100.0 * r.world / r.alone_sum);
  }
  out.alone_sum = median(alone_sums);
  out.world = median(worlds);
  out.efficiency_pct = 100.0 * out.world / out.alone_sum;
  const auto [low, high] = std::minmax_element(efficiency.begin(), efficiency.end());
  out.lowest_round_pct = *low;
  out.highest_round_pct = *high;
  out.lockstep_bound = plan.ranks * median(slowest);
  out.model = report.at("model");
  return out;
}

}  // namespace partune::validate
