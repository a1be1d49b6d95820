// The failures, checkpoint and goodput lines of `estimate` (report.hpp's resilience_text
// and resilience_json; goodput.hpp computes them).
#include <fmt/format.h>

#include <cmath>

#include "partune/costmodel/goodput.hpp"
#include "partune/costmodel/training_cost.hpp"
#include "partune/costmodel/units.hpp"
#include "partune/report/report.hpp"
#include "partune/report/report_units.hpp"

namespace partune::report {

namespace {

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr); }

}  // namespace

std::string resilience_text(const Job& job, const StepMetrics& e, double tokens) {
  const InstanceType& inst = job.cluster.instance;
  const Resilience r = resilience(job);
  if (r.failures_per_second <= 0)
    return fmt::format("\nfailures             not modelled ({} has no failures: section)\n", inst.name);
  const Goodput g = goodput(r);
  std::string s = "\n";
  s += fmt::format("failures             one every {} ({} GPUs x {:.3g} per GPU-hour{})\n", duration(r.mtbf_seconds()),
                   job.world_size(), inst.failures.per_gpu_per_hour,
                   inst.failures.per_node_per_hour > 0
                       ? fmt::format(" + {} nodes x {:.3g} per node-hour", job.cluster.nodes,
                                     inst.failures.per_node_per_hour)
                       : std::string());
  s += fmt::format("checkpoint           {} (weights and optimizer states), written and restored in {} each "
                   "({} nodes x {:.1f} GB/s); restart {}\n",
                   gib(r.checkpoint_bytes), seconds(r.write_seconds), job.cluster.nodes,
                   inst.checkpoint_storage.per_node_bw / units::giga, duration(r.restart_seconds));
  s += fmt::format("checkpoint interval  {} of work (Young/Daly: sqrt(2 x {} x {}) - {})\n", duration(g.interval),
                   seconds(r.write_seconds), duration(r.mtbf_seconds()), seconds(r.write_seconds));
  s += fmt::format("goodput              {:.1f}% of the wall time is progress\n", 100 * g.fraction);
  if (tokens > 0 && e.fits) {
    TrainingCostOptions o;
    o.tokens = tokens;
    const TrainingCost c = training_cost(job, e.step_time, o);
    s += fmt::format("time-to-train        {} for {:.3g} tokens, {} with failures\n", duration(c.seconds), tokens,
                     std::isfinite(c.failure_seconds) ? duration(c.failure_seconds) : std::string("never"));
  }
  return s;
}

nlohmann::json resilience_json(const Job& job, const StepMetrics& e, double tokens) {
  const Resilience r = resilience(job);
  const Goodput g = goodput(r);
  nlohmann::json j = {{"failures_per_hour", r.failures_per_second * 3600.0},
                      {"mtbf_s", finite_or_null(r.mtbf_seconds())},
                      {"checkpoint_bytes", r.checkpoint_bytes},
                      {"checkpoint_write_s", r.write_seconds},
                      {"restart_s", r.restart_seconds},
                      {"checkpoint_interval_s", finite_or_null(g.interval)},
                      {"goodput", g.fraction}};
  if (tokens > 0 && e.fits) {
    TrainingCostOptions o;
    o.tokens = tokens;
    const TrainingCost c = training_cost(job, e.step_time, o);
    j["time_to_train_s"] = c.seconds;
    j["time_to_train_with_failures_s"] = finite_or_null(c.failure_seconds);
  }
  return j;
}

}  // namespace partune::report
