// Failures, checkpoints and goodput (goodput.hpp).
#include "partune/costmodel/goodput.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "partune/costmodel/parameter_count.hpp"

namespace partune {

namespace {
constexpr double kInfinity = std::numeric_limits<double>::infinity();
}  // namespace

double Resilience::mtbf_seconds() const { return failures_per_second > 0 ? 1.0 / failures_per_second : kInfinity; }

Resilience resilience(const Job& job) {
  const InstanceType& inst = job.cluster.instance;
  Resilience r;
  const double nodes = job.cluster.nodes;
  r.failures_per_second =
      (job.world_size() * inst.failures.per_gpu_per_hour + nodes * inst.failures.per_node_per_hour) / 3600.0;
  // The weights and the optimizer states (fp32 master weights and moments in mixed
  // precision), each element once however the ranks share them; not the gradients.
  const ParameterBytes bytes = parameter_bytes(job);
  r.checkpoint_bytes = total_parameters(job.model) * (bytes.weights + bytes.optimizer);
  const double bw = nodes * inst.checkpoint_storage.per_node_bw;
  r.write_seconds = r.restore_seconds = bw > 0 ? r.checkpoint_bytes / bw : 0.0;
  r.restart_seconds = inst.failures.restart_seconds;
  return r;
}

double young_daly_interval(double delta, double mtbf) {
  if (!std::isfinite(mtbf)) return kInfinity;
  if (delta >= 2.0 * mtbf) return mtbf;
  return std::sqrt(2.0 * delta * mtbf) - delta;
}

double goodput_at(const Resilience& r, double tau) {
  const double lambda = r.failures_per_second, delta = r.write_seconds;
  if (lambda <= 0) return std::isfinite(tau) ? tau / (tau + delta) : 1.0;
  const double lost = lambda * (r.restart_seconds + r.restore_seconds + (tau + delta) / 2.0);
  return std::max(0.0, tau / (tau + delta) * (1.0 - lost));
}

Goodput goodput(const Resilience& r) {
  Goodput g;
  g.interval = young_daly_interval(r.write_seconds, r.mtbf_seconds());
  g.fraction = goodput_at(r, g.interval);
  return g;
}

}  // namespace partune
