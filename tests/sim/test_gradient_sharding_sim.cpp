// Gradient sharding (ZeRO-2) in the estimator and the simulator: every micro-batch's
// buckets travel, so the step pays the data-parallel reduce-scatter once per micro-batch
// instead of once per step. The simulator runs the programs' buckets event by event (each
// one beside the layers below it and the next forward); the estimator prices the earlier
// micro-batches' buckets as the last one's stretch of the backward plus what is left beside
// the following forward. On idle links the two agree within 10% over the schedules (the
// issue's rule for every new mechanism); measured 2026-11-28: -4.9% (zb-h1) to +0.4%.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

namespace {

Job zero_job(const std::string& parallel, bool shard_gradients, int nodes = 4, int global_batch = 64) {
  const std::string yaml = "model: gpt3-2.7b\ncluster: {instance_type: p4d.24xlarge, nodes: " + std::to_string(nodes) +
                           "}\ntraining: {global_batch: " + std::to_string(global_batch) +
                           ", precision: fp16}\nparallel: {microbatches: 8, activation_checkpointing: full, "
                           "shard_optimizer_state: true, shard_gradients: " +
                           (shard_gradients ? "true" : "false") + ", " + parallel + "}\n";
  return parse_job(yaml, "zero2");
}

}  // namespace

TEST_CASE("ZeRO-2: estimator and simulator agree, and each micro-batch's buckets cost time", "[sim][zero2]") {
  const std::vector<std::string> layouts = {
      "tensor_parallel_degree: 8",                                        // dp 4 across the nodes
      "pipeline_parallel_degree: 4, tensor_parallel_degree: 2",           // 1F1B
      "pipeline_parallel_degree: 4, tensor_parallel_degree: 2, pipeline: simple",
      "pipeline_parallel_degree: 4, tensor_parallel_degree: 2, virtual_stages: 2",
      "pipeline_parallel_degree: 4, tensor_parallel_degree: 2, pipeline: zb-h1",
  };
  for (const std::string& layout : layouts) {
    INFO(layout);
    const Job two = zero_job(layout, true), one = zero_job(layout, false);
    const double estimated = estimate(two).step_time;
    const sim::SimResult simulated = sim::simulate(two), simulated_one = sim::simulate(one);
    INFO("ZeRO-2 estimator " << estimated << " s, simulator " << simulated.metrics.step_time << " s; ZeRO-1 simulator "
                             << simulated_one.metrics.step_time << " s");
    CHECK(std::fabs(estimated / simulated.metrics.step_time - 1) <= 0.10);
    // Seven more reduce-scatters of the stage's gradients: at least some of them show.
    CHECK(simulated.metrics.step_time > simulated_one.metrics.step_time);
    CHECK(simulated.exposed.data > simulated_one.exposed.data);
  }
}
