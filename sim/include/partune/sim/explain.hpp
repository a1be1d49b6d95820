#pragma once
// The estimator against the simulator on one job: the step split the same way on both
// sides (what the critical rank spent where), and which part differs most and why.
#include <string>
#include <vector>

#include "partune/costmodel/estimator.hpp"
#include "partune/sim/simulator.hpp"

namespace partune::sim {

struct StepPart {
  std::string name;             // "compute", "layer collectives (tensor, context, expert)", ...
  double estimated_s = 0;       // the estimator's share of its step
  double simulated_s = 0;       // the simulation's, on the critical rank
};

struct EstimatorVsSimulation {
  double estimated_step_s = 0, simulated_step_s = 0;
  double difference_pct = 0;    // 100 (simulated / estimated - 1)
  // compute, tensor, pipeline (bubble, transfers, waits), data (exposed), sharded
  // (exposed), offload (exposed): always these six, in this order.
  std::vector<StepPart> parts;
  int largest = 0;              // the part whose |simulated - estimated| is largest
  // Whether the largest difference is within 2% of the estimator's step.
  bool agree = true;
  std::string why;              // the mechanism behind the largest difference
};

EstimatorVsSimulation explain_difference(const Estimate& estimated, const SimResult& simulated);

}  // namespace partune::sim
