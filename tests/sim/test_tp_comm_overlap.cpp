// Tensor-parallel communication overlap (parallel.tp_comm_overlap, Megatron's userbuffers):
// the sequence-parallel all-gathers and reduce-scatters run beside their GEMMs, costing the
// GEMMs the multiprocessors they hold (p5's NCCL kernels: 24 CTAs of 132 SMs).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

namespace {

Job tp_job(bool overlap, const std::string& extra = "") {
  const std::string yaml =
      "model: gpt3-2.7b\ncluster: {instance_type: p5.48xlarge, nodes: 1}\n"
      "training: {global_batch: 16, precision: bf16}\n"
      "parallel: {tensor_parallel_degree: 8, sequence_parallel: true, microbatches: 16, flash_attention: true" +
      std::string(overlap ? ", tp_comm_overlap: true" : "") + extra + "}\n";
  return parse_job(yaml, "tp-overlap.yaml");
}

}  // namespace

TEST_CASE("the layer's sequence-parallel collectives run beside their GEMMs", "[tp_overlap]") {
  const Job plain = tp_job(false), overlapped = tp_job(true);
  const LayerPlan a = transformer_layer_plan(plain.model, plan_config(plain));
  const LayerPlan b = transformer_layer_plan(overlapped.model, plan_config(overlapped));
  for (PlanPass pass : {PlanPass::forward, PlanPass::backward}) {
    const auto before = tensor_collectives(a, pass), after = tensor_collectives(b, pass);
    REQUIRE(before.size() == after.size());
    for (std::size_t i = 0; i < after.size(); ++i) {
      CHECK(after[i].kind == before[i].kind);  // the same collectives, of the same size
      CHECK(after[i].bytes == before[i].bytes);
      CHECK(after[i].overlapped);  // each beside a GEMM now
    }
  }
  // Forward: all-gather before QKV and fc1, reduce-scatter after the projection and fc2.
  CHECK(tensor_collectives(b, PlanPass::forward).size() == 4);
}

// Where the GEMMs outlast the communication, all but the SMs' share of it hides: exposed
// tensor time at least 24/132 of the blocking one, and less than it.
TEST_CASE("overlap hides the tensor collectives but for the SMs they hold", "[tp_overlap]") {
  const Estimate plain = estimate(tp_job(false)), overlapped = estimate(tp_job(true));
  const double blocking = plain.breakdown.tensor_parallel_comm, exposed = overlapped.breakdown.tensor_parallel_comm;
  INFO("tensor collectives " << blocking << " s blocking, " << exposed << " s overlapped");
  REQUIRE(blocking > 0);
  CHECK(exposed < 0.5 * blocking);
  CHECK(exposed >= 24.0 / 132.0 * blocking * 0.2);  // the embedding's and loss's stay blocking
  CHECK(overlapped.step_time < plain.step_time);
  CHECK(overlapped.step_time >= plain.step_time - blocking);
}

TEST_CASE("the estimator and the simulator agree on an overlapped tensor-parallel job", "[tp_overlap][sim]") {
  for (bool overlap : {false, true}) {
    const Job job = tp_job(overlap);
    const double est = estimate(job).step_time;
    sim::SimOptions so;
    const double sim = sim::simulate(job, so).metrics.step_time;
    INFO("overlap " << overlap << ": estimator " << est << " s, simulator " << sim << " s");
    // Within 5%, also where the overlapped collectives outlast the GEMMs beside them (these
    // 10.5 MB collectives, ~60 us each at NCCL's latencies): exposed_beside's rule.
    CHECK(std::abs(sim - est) <= 0.05 * est);
  }
}

TEST_CASE("tp_comm_overlap is a job key and needs sequence parallelism", "[tp_overlap][scenario]") {
  const Job j = tp_job(true);
  CHECK(j.parallel.tp_comm_overlap);
  CHECK(parse_job(job_yaml(j, "a test"), "again.yaml").parallel.tp_comm_overlap);
  const std::string bad =
      "model: gpt3-2.7b\ncluster: {instance_type: p5.48xlarge, nodes: 1}\ntraining: {global_batch: 16, precision: bf16}\n"
      "parallel: {tensor_parallel_degree: 8, microbatches: 16, tp_comm_overlap: true}\n";
  try {
    (void)parse_job(bad, "bad.yaml");
    FAIL("expected a ScenarioError");
  } catch (const ScenarioError& e) {
    CHECK(std::string(e.what()).find("tp_comm_overlap") != std::string::npos);
    CHECK(std::string(e.what()).find("sequence_parallel") != std::string::npos);
  }
  // Without a tensor-parallel group there is nothing to overlap: accepted, no effect.
  const Job one = parse_job("model: gpt3-2.7b\ncluster: {instance_type: p5.48xlarge, nodes: 1}\n"
                            "training: {global_batch: 16, precision: bf16}\nparallel: {tp_comm_overlap: true, "
                            "microbatches: 2, sharded_data_parallel_degree: 8}\n",
                            "one.yaml");
  CHECK(one.parallel.tp_comm_overlap);
}
