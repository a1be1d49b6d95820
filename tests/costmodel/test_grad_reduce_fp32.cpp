// parallel.grad_reduce_in_fp32 (Megatron-core's name): gradients kept and reduced in fp32.
// Against hand numbers: a mixed-precision Adam parameter costs 2 + 4 + 12 = 18 bytes
// (Megatron's count with fp32 main gradients) instead of 16; every gradient reduction
// carries twice the bytes of a 16-bit gradient, and nothing else changes — not the
// weights' all-gathers, not the activations' tensor collectives, not the pipeline's.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

// A gradient reduction: the data-parallel buckets and their expert share, the sharded
// reduce-scatters, the replicas' all-reduce, the tied embedding's sum, and the step-end
// sum over the tensor group (the only tensor collective without a micro-batch).
bool reduces_gradients(const Instruction& in) {
  switch (in.group) {
    case CommGroup::data:
    case CommGroup::expert_data: return in.kind == OpKind::reduce_scatter || in.kind == OpKind::all_reduce;
    case CommGroup::sharded: return in.kind == OpKind::reduce_scatter;
    case CommGroup::replica:
    case CommGroup::embedding: return true;
    case CommGroup::tensor: return in.microbatch < 0;
    default: return false;
  }
}

// The same job with gradients in fp32: instruction by instruction, gradient reductions
// carry twice the bytes (fp16 -> fp32), the optimizer step reads fp32 gradients (a
// mixed-precision Adam step moves 2 + 2 x 12 + 2 = 28 bytes a parameter with 16-bit
// gradients, 30 with fp32 ones: its memory time grows by 30/28 beside its 4 launches), and
// every other instruction is unchanged.
void check_doubled(Job j, const std::string& what) {
  INFO(what);
  require_valid(j);
  const std::vector<RankProgram> half = build_programs(j);
  j.parallel.grad_reduce_in_fp32 = true;
  const std::vector<RankProgram> full = build_programs(j);
  REQUIRE(half.size() == full.size());
  int reductions = 0, steps = 0;
  for (std::size_t r = 0; r < half.size(); ++r) {
    REQUIRE(half[r].ops.size() == full[r].ops.size());
    for (std::size_t i = 0; i < half[r].ops.size(); ++i) {
      const Instruction& a = half[r].ops[i];
      const Instruction& b = full[r].ops[i];
      INFO("rank " << r << " instruction " << i << " " << to_string(a.kind));
      REQUIRE(a.kind == b.kind);
      if (reduces_gradients(a) && a.bytes > 0) {
        ++reductions;
        CHECK(b.bytes == Approx(2.0 * a.bytes).epsilon(1e-12));
      } else {
        CHECK(b.bytes == a.bytes);
      }
      if (a.kind == OpKind::optimizer_step) {
        const double launches = 4 * j.cluster.instance.gpu.kernel_overhead;
        CHECK(b.seconds - launches == Approx((a.seconds - launches) * 30.0 / 28.0).epsilon(1e-9));
        ++steps;
      } else {
        CHECK(b.seconds == a.seconds);  // compute is untouched
      }
    }
  }
  CHECK(reductions > 0);
  CHECK(steps == static_cast<int>(half.size()));  // one optimizer step a rank
}

}  // namespace

TEST_CASE("fp32 gradients: 18 bytes a mixed-precision Adam parameter", "[grad_fp32][memory]") {
  // GPT-2 small on one p4d node, pure data parallelism (dp 8), no sharding: per GPU the
  // whole model's states. 16-bit gradients: 2 bytes a parameter; fp32: 4.
  Job j = p4d_job("gpt2-small", 1, 8);
  require_valid(j);
  const double params = stage_parameter_count(j, 0);
  const MemoryBreakdown half = stage_memory(j, 0);
  CHECK(half.gradients == Approx(2.0 * params).epsilon(1e-12));
  CHECK(half.parameters + half.gradients + half.optimizer_states == Approx(16.0 * params).epsilon(1e-12));
  j.parallel.grad_reduce_in_fp32 = true;
  const MemoryBreakdown full = stage_memory(j, 0);
  CHECK(full.gradients == Approx(4.0 * params).epsilon(1e-12));
  CHECK(full.parameters == half.parameters);
  CHECK(full.parameters + full.gradients + full.optimizer_states == Approx(18.0 * params).epsilon(1e-12));
  // The gradient buckets in flight are fp32 too.
  CHECK(full.communication_buffers == Approx(2.0 * half.communication_buffers).epsilon(1e-12));
  // fp32 training keeps fp32 gradients already: the key changes nothing.
  Job fp32 = p4d_job("gpt2-small", 1, 8);
  fp32.training.precision = Precision::fp32;
  const double before = stage_memory(fp32, 0).total();
  fp32.parallel.grad_reduce_in_fp32 = true;
  CHECK(stage_memory(fp32, 0).total() == before);
}

TEST_CASE("fp32 gradients: every gradient reduction doubles, nothing else moves", "[grad_fp32][program]") {
  Job dp = p4d_job("gpt2-small", 2, 32);  // data parallel 16 across two nodes
  check_doubled(dp, "data parallel 16");
  Job zero1 = dp;
  zero1.parallel.shard_optimizer_state = true;  // reduce-scatter, then the weights' all-gather (unchanged)
  check_doubled(zero1, "optimizer sharding over 16");
  Job pipe = p4d_job("gpt2-small", 1, 16);  // tied embedding across 2 stages, tensor 2 with sequence parallelism
  pipe.parallel.pipeline_parallel_degree = 2;
  pipe.parallel.tensor_parallel_degree = 2;
  pipe.parallel.sequence_parallel = true;
  pipe.parallel.microbatches = 4;
  check_doubled(pipe, "pipeline 2 x tensor 2 x data 2, sequence parallel");
  Job sharded = p4d_job("gpt2-small", 2, 32);
  sharded.parallel.sharded_data_parallel_degree = 8;  // 2 replicas of 8 shards: reduce-scatter + replica all-reduce
  check_doubled(sharded, "sharded 8 x 2 replicas");
}

TEST_CASE("fp32 gradients: the key loads, writes back, and slows a data-parallel step", "[grad_fp32][scenario]") {
  const std::string yaml = "model: gpt2-xl\ncluster: {instance_type: p4d.24xlarge, nodes: 4}\n"
                           "training: {global_batch: 64, precision: bf16}\n"
                           "parallel: {grad_reduce_in_fp32: true}\n";
  const Job j = parse_job(yaml, "fp32.yaml");
  CHECK(j.parallel.grad_reduce_in_fp32);
  CHECK(parse_job(job_yaml(j, "test"), "again.yaml").parallel.grad_reduce_in_fp32);
  Job off = parse_job(yaml, "fp32.yaml", {"grad_reduce_in_fp32=false"});
  CHECK_FALSE(off.parallel.grad_reduce_in_fp32);
  // 32 replicas over 4 nodes: the gradient all-reduce is on the network, and twice its
  // bytes take longer (not exactly twice: latency and the part hidden under backward).
  const Estimate a = estimate(off), b = estimate(j);
  CHECK(b.breakdown.data_parallel_comm > 1.5 * a.breakdown.data_parallel_comm);
  CHECK(b.breakdown.data_parallel_comm <= 2.0 * a.breakdown.data_parallel_comm);
  CHECK(b.step_time > a.step_time);
}
