// An NVLink domain larger than a node (issue 31): GB200 NVL72 trays of 4 GPUs whose NVLink
// reaches 72. Tensor and expert groups up to the domain stay on NVLink in the estimator
// (their span is one NVLink level) and in the simulator (their routes use the NVSwitch
// ports), the two agree, and the same groups on 8-GPU nodes cross the network and take
// longer.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/job_costs.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

namespace {

// LLaMA-3 8B (32 heads, 8 key/value heads) at 4k tokens over tensor 16 on `nodes` of an
// instance type.
Job tensor16(const std::string& instance, int nodes) {
  return parse_job("kind: job\nname: t\nmodel: {base: llama-3-8b, seq_len: 4096}\n"
                   "cluster: {instance_type: " +
                       instance + ", nodes: " + std::to_string(nodes) +
                       "}\ntraining: {global_batch: 8, precision: bf16}\n"
                       "parallel: {tensor_parallel_degree: 16, sequence_parallel: true, flash_attention: true, "
                       "microbatches: 4}\n",
                   "nvl.yaml");
}

}  // namespace

TEST_CASE("tensor 16 inside an NVLink domain of 72: one NVLink level, estimator and simulator agree",
          "[sim][nvlink]") {
  const Job gb200 = tensor16("p6e-gb200.36xlarge", 8);  // 32 GPUs: one domain, data 2
  const JobCosts costs(gb200);
  CHECK(costs.tensor_span(0).nodes == 1);
  CHECK(costs.tensor_span(0).size == 16);
  const Estimate e = estimate(gb200);
  sim::SimOptions every_rank;
  every_rank.use_symmetry = false;
  const sim::SimResult r = sim::simulate(gb200, every_rank);
  CHECK(r.metrics.step_time == Approx(e.step_time).epsilon(0.05));
  // The same trays without the domain (each tray its own NVLink island of 4): tensor 16
  // spans 4 of them and its collectives cross EFA.
  Job islands = gb200;
  islands.cluster.instance.nvlink_domain_gpus = 0;
  const JobCosts apart(islands);
  CHECK(apart.tensor_span(0).nodes == 4);
  CHECK(estimate(islands).step_time > e.step_time);
  CHECK(sim::simulate(islands, every_rank).metrics.step_time > r.metrics.step_time);
}

TEST_CASE("tensor 16 is refused on 8-GPU nodes, taken on NVL72", "[nvlink][job]") {
  try {
    tensor16("p6-b200.48xlarge", 4);
    FAIL("tensor 16 on 8-GPU nodes loads");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "parallel.tensor_parallel_degree");
    CHECK_THAT(std::string(e.what()), Catch::Contains("larger than a node (8 GPUs)"));
  }
  Job wide = tensor16("p6e-gb200.36xlarge", 4);  // 16 GPUs of one domain
  wide.cluster.nodes = 16;                        // 64 GPUs
  wide.parallel.tensor_parallel_degree = 64;      // refused by the heads (32), not the domain
  CHECK(check_job(wide).key == "parallel.tensor_parallel_degree");
  CHECK_THAT(check_job(wide).reason, Catch::Contains("attention heads"));
}

TEST_CASE("expert groups of 16: on NVL72 one NVLink level, on 8-GPU nodes across EFA", "[sim][nvlink][moe]") {
  // Qwen3-30B-A3B (128 experts of 768) on 64 GPUs, expert groups of 16 consecutive ranks.
  const auto job = [](const std::string& instance, int nodes) {
    return parse_job("kind: job\nname: t\nmodel: {base: qwen3-30b-a3b, seq_len: 4096}\n"
                     "cluster: {instance_type: " +
                         instance + ", nodes: " + std::to_string(nodes) +
                         "}\ntraining: {global_batch: 64, precision: bf16}\n"
                         "parallel: {expert_parallel_degree: 16, flash_attention: true, shard_optimizer_state: true}\n",
                     "moe.yaml");
  };
  const Job gb200 = job("p6e-gb200.36xlarge", 16), b200 = job("p6-b200.48xlarge", 8);
  CHECK(JobCosts(gb200).expert_span().nodes == 1);
  CHECK(JobCosts(b200).expert_span().nodes == 2);
  // The all-to-alls (booked as expert traffic) take less on NVLink, in the estimator and in
  // the simulator.
  CHECK(estimate(gb200).breakdown.expert_parallel_comm < estimate(b200).breakdown.expert_parallel_comm);
  CHECK(sim::simulate(gb200).metrics.breakdown.expert_parallel_comm <
        sim::simulate(b200).metrics.breakdown.expert_parallel_comm);
}
