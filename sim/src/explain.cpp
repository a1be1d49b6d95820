#include "partune/sim/explain.hpp"

#include <algorithm>
#include <array>
#include <cmath>

namespace partune::sim {

namespace {

using Parts = std::array<double, 6>;

Parts parts_of(const StepMetrics& e) {
  const StepBreakdown& b = e.breakdown;
  return {b.compute + b.optimizer, b.layer_comm(), b.pipeline_bubble + b.pipeline_drain_waits + b.pipeline_p2p,
          b.data_parallel_exposed, b.sharded_exposed, b.offload_exposed};
}

// The simulation's critical rank: what is not compute or exposed collectives is pipeline.
Parts parts_of(const SimResult& r) {
  const auto& x = r.exposed;
  Parts p{r.metrics.breakdown.compute, x.tensor, 0, x.data, x.sharded, x.offload};
  p[2] = std::max(0.0, r.metrics.step_time - p[0] - p[1] - p[3] - p[4] - p[5]);
  return p;
}

constexpr const char* kNames[] = {"compute",
                                  "layer collectives (tensor, context, expert)",
                                  "pipeline (bubble, transfers, waits)",
                                  "data-parallel gradients (exposed)",
                                  "sharded collectives (exposed)",
                                  "offload (exposed)"};

constexpr const char* kWhy[] = {
    "kernel time differs only through non-uniform stages: check the stage utilisation line",
    "the layers' collectives (tensor all-reduces, context exchanges, expert all-to-alls) share NVSwitch ports "
    "or NICs with other traffic in the simulation",
    "the simulated pipeline also waits on transfers and on neighbours slowed by their own "
    "communication; the estimator charges fill and drain from each stage's work alone",
    "gradient buckets of every stage and replica share the NICs over time in the simulation; "
    "the estimator assumes all groups of a kind communicate at once and overlap only the "
    "slowest stage's last backward",
    "per-layer gathers and reduce-scatters queue on one stream in the simulation and the first "
    "gather of every pass is exposed",
    "PCIe copies of neighbouring GPUs share their switch, and reloads run "
    "activation_loading_horizon layers (or whole chunks) ahead"};

}  // namespace

EstimatorVsSimulation explain_difference(const Estimate& estimated, const SimResult& simulated) {
  EstimatorVsSimulation out;
  out.estimated_step_s = estimated.step_time;
  out.simulated_step_s = simulated.metrics.step_time;
  out.difference_pct = 100 * (simulated.metrics.step_time / estimated.step_time - 1);
  const Parts a = parts_of(estimated), s = parts_of(simulated);
  for (int i = 0; i < 6; ++i) {
    out.parts.push_back({kNames[i], a[i], s[i]});
    if (a[i] == 0 && s[i] == 0) continue;
    if (std::fabs(s[i] - a[i]) > std::fabs(s[out.largest] - a[out.largest])) out.largest = i;
  }
  out.agree = std::fabs(s[out.largest] - a[out.largest]) <= 0.02 * estimated.step_time;
  out.why = kWhy[out.largest];
  return out;
}

}  // namespace partune::sim
