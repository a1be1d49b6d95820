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

// The kernels one forward and one backward of a plan launch (op_cost.cpp's count).
long plan_launches(const LayerPlan& plan, bool flash) {
  long n = 0;
  for (const PlanOp& op : plan.ops) {
    n += op.forward_work.total_kernels() + op.backward_work.total_kernels();
    if (op.kind == PlanOpKind::gemm) n += 3 * static_cast<long>(op.batch);
    if (op.kind == PlanOpKind::attention_core) n += flash ? 4 : op.score_passes_in_work ? 6 : 12;
  }
  return n;
}

// One plan run `times` times forward and backward, with what `policy` recomputes.
void add_plan(const GpuProfile& gpu, const LayerPlan& plan, const Job& job, double times, KernelBreakdown& b) {
  const bool flash = job.parallel.flash_attention && plan.part == PlanPart::layer;
  const LayerTime t = plan_time(gpu, plan, job.training.precision, flash);
  add_pass(t, true, times, b);
  add_pass(t, false, times, b);
  b.launches += static_cast<long>(times) * plan_launches(plan, flash);
  if (plan.part != PlanPart::layer) return;
  // Full recomputation repeats the whole forward; selective the attention core's.
  const Checkpointing policy = job.parallel.activation_checkpointing;
  if (policy == Checkpointing::full) add_pass(t, true, times, b);
  if (policy == Checkpointing::selective) b.attention += times * t.attention_fwd;
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
  const double params = stage_parameter_count(job, rank, 0) * job.optimizer_shard_fraction();
  const int tensors = stage_parameter_tensors(job, rank, 0);
  const OptimizerTime o = optimizer_times(gpu, job.training, params, tensors, job.gradient_bytes_per_element());
  b.optimizer = o.step;
  b.copy += o.conversions;
  if (job.training.optimizer_impl == OptimizerImpl::torch) b.launches += 2L * tensors;
  return b;
}

}  // namespace partune
