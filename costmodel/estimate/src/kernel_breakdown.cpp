// A rank's step by kernel category (kernel_breakdown.hpp).
#include "partune/costmodel/kernel_breakdown.hpp"

#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/parameter_count.hpp"

namespace partune {

std::vector<std::pair<std::string, double>> KernelBreakdown::categories() const {
  return {{"gemm", gemm},           {"attention", attention}, {"elementwise", elementwise},
          {"reduction_norm", reduction_norm}, {"copy", copy}, {"optimizer", optimizer}};
}

namespace {

// Adds `times` x one pass of a plan's ops, by part (`forward`: the forward's).
void add_pass(const LayerTime& t, bool forward, double times, KernelBreakdown& b) {
  const auto& by_class = forward ? t.class_fwd : t.class_bwd;
  b.gemm += times * (forward ? t.gemm_fwd : t.gemm_bwd);
  b.attention += times * (forward ? t.attention_fwd : t.attention_bwd);
  b.elementwise += times * (by_class[static_cast<int>(KernelClass::elementwise)] +
                            by_class[static_cast<int>(KernelClass::strided)]);
  b.reduction_norm += times * by_class[static_cast<int>(KernelClass::norm)];
  b.copy += times * (by_class[static_cast<int>(KernelClass::copy)] +
                     by_class[static_cast<int>(KernelClass::strided_copy)] +
                     by_class[static_cast<int>(KernelClass::transpose)]);
  b.dispatch_idle += times * (forward ? t.idle_fwd : t.idle_bwd);
}

// One plan run `times` times forward and backward, and the forward of the ops the job's
// checkpointing repeats in backward (layer_plan.hpp's `recomputed`, the one rule).
void add_plan(const GpuProfile& gpu, const LayerPlan& plan, const Job& job, double times, KernelBreakdown& b) {
  const bool flash = job.parallel.flash_attention && plan.part == PlanPart::layer;
  const LayerTime t = plan_time(gpu, plan, job.training.precision, flash);
  add_pass(t, true, times, b);
  add_pass(t, false, times, b);
  b.launches += static_cast<long>(times) * (t.launches_fwd + t.launches_bwd);
  LayerPlan repeated = plan;
  repeated.ops.clear();
  for (const PlanOp& op : plan.ops)
    if (recomputed(op, job.parallel.activation_checkpointing)) repeated.ops.push_back(op);
  if (repeated.ops.empty()) return;
  const LayerTime r = plan_time(gpu, repeated, job.training.precision, flash);
  add_pass(r, true, times, b);
  b.launches += static_cast<long>(times) * r.launches_fwd;
}

}  // namespace

KernelBreakdown kernel_breakdown(const Job& job) {
  KernelBreakdown b;
  const GpuProfile& gpu = job.cluster.instance.gpu;
  const PlanConfig c = plan_config(job);
  const double microbatches = static_cast<double>(job.parallel.microbatches) * job.training.gradient_accumulation;
  const LayerMix mix = job.stage_mix(0);
  if (mix.dense > 0) add_plan(gpu, transformer_layer_plan(job.model, c), job, microbatches * mix.dense, b);
  if (mix.moe > 0) add_plan(gpu, moe_layer_plan(job.model, c), job, microbatches * mix.moe, b);
  add_plan(gpu, embedding_plan(job.model, c), job, microbatches, b);
  if (job.lm_head_stage() == 0) add_plan(gpu, head_plan(job.model, c), job, microbatches, b);
  const RankParameters rank = rank_parameters(job);
  const double params = stage_optimizer_parameters(job, rank, 0);
  const int tensors = stage_parameter_tensors(job, rank, 0);
  const OptimizerTime o = optimizer_times(gpu, job.training, params, tensors, job.gradient_bytes_per_element());
  b.optimizer = o.step;
  b.copy += o.conversions;
  if (job.training.optimizer_impl == OptimizerImpl::torch) b.launches += 2L * tensors;
  return b;
}

}  // namespace partune
