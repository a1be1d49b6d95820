#include "judge_points.hpp"

#include <algorithm>
#include <atomic>
#include <thread>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/job_costs.hpp"

namespace partune::search {

namespace {

// Points handed out at a time: large enough that the shared counter costs nothing, small
// enough that the threads finish together (zero-bubble points take six times longer).
constexpr std::size_t kChunk = 2048;

// One point: its costs built once, its memory first, its step only when it fits.
PointVerdict judge(const Point& p, Job& scratch, ModelCosts& model, double memory_limit) {
  apply(p, scratch);
  const JobCosts costs(scratch, model);
  PointVerdict v;
  const MemoryFit m = estimate_memory(costs);
  v.peak_bytes = m.memory.total();
  v.fits = m.fits && v.peak_bytes <= memory_limit;
  if (v.fits) v.step_time = estimate(costs, m).step_time;
  return v;
}

}  // namespace

std::vector<PointVerdict> judge_points(const Job& base, const std::vector<Point>& points, double memory_limit,
                                       int threads, const std::function<void(long done)>& progress) {
  std::vector<PointVerdict> verdicts(points.size());
  std::atomic<std::size_t> next{0};
  std::atomic<long> done{0};
  auto work = [&](bool report) {
    Job scratch = base;
    // Points differ in parallel and training knobs only: the scratch job's model and GPU stay
    // put, so this thread builds their plans and op times once per configuration.
    ModelCosts model(scratch.model, scratch.cluster.instance.gpu);
    for (;;) {
      const std::size_t from = next.fetch_add(kChunk);
      if (from >= points.size()) return;
      const std::size_t to = std::min(points.size(), from + kChunk);
      for (std::size_t i = from; i < to; ++i) verdicts[i] = judge(points[i], scratch, model, memory_limit);
      const long total = done.fetch_add(static_cast<long>(to - from)) + static_cast<long>(to - from);
      if (report && progress) progress(total);
    }
  };
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t n = std::min<std::size_t>(threads > 0 ? static_cast<std::size_t>(threads) : cores,
                                              std::max<std::size_t>(1, points.size() / kChunk));
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < n; ++t) helpers.emplace_back(work, false);
  work(true);
  for (std::thread& h : helpers) h.join();
  return verdicts;
}

}  // namespace partune::search
