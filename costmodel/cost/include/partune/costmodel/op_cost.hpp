#pragma once
// Time of one kernel on one GPU: a roofline with shape-dependent GEMM efficiency.
#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/layer_plan.hpp"

namespace partune {

// Efficiency (fraction of dense peak) of an m x n x k GEMM on this GPU.
double gemm_efficiency(const GpuProfile& gpu, double m, double n, double k);
// Seconds for `batch` GEMMs of m x n x k: max(compute, memory) + launch overhead. In an 8-
// or 4-bit format the operands are already cast: the casts are the plan op's kernel work
// (PlanOp::casts_in_work: the eager stack's or Transformer Engine's under the fp8 recipe).
double gemm_time(const GpuProfile& gpu, Precision p, double m, double n, double k, double batch = 1.0);
// Seconds for a kernel that streams `bytes` through HBM.
double memory_bound_time(const GpuProfile& gpu, double bytes);
// The fraction of the HBM rate kernels of class `c` reach (GpuProfile's rates; a class
// without its own measured rate runs at hbm_efficiency).
double kernel_class_efficiency(const GpuProfile& gpu, KernelClass c);
// Seconds of the memory-bound kernels `w` on the device, class by class: their bytes at
// their class's rate and each launch's kernel_overhead.
double kernel_work_time(const GpuProfile& gpu, const KernelWork& w);
double kernel_class_time(const GpuProfile& gpu, const KernelWork& w, KernelClass c);

// FlashAttention's rule (its own accounting): causal attention does this fraction of the
// unmasked score FLOPs, and backward this many times the forward's. calibrate's fit of
// gpu.attention.flash_efficiency reads the same constants (calibration_fit.cpp).
inline constexpr double kFlashCausalFlopFraction = 0.5;
inline constexpr double kFlashBackwardFactor = 2.5;

// Forward and backward time of one transformer layer on one tensor-parallel rank for a
// micro-batch, split into the parts the estimator and the per-rank programs need.
struct LayerTime {
  double gemm_fwd = 0;        // QKV, projection, FFN
  double attention_fwd = 0;   // score + context (standard or flash)
  double elementwise_fwd = 0; // norms, activation, dropout, residuals
  double gemm_bwd = 0;
  double attention_bwd = 0;
  double elementwise_bwd = 0;
  // Of gemm_bwd, the weight gradients dW = X^T dY: what a zero-bubble schedule's W step
  // runs (schedule.hpp); the rest of backward is its B step.
  double gemm_weight_bwd = 0;
  // Of elementwise_fwd / _bwd: the memory-bound kernels by class (KernelClass), and what
  // the host's dispatch leaves idle (an op whose kernels take less time on the device than
  // the host takes to launch them: GpuProfile::dispatch, LayerPlan::host_dispatch).
  std::array<double, kKernelClasses> class_fwd{}, class_bwd{};
  double idle_fwd = 0, idle_bwd = 0;
  long launches_fwd = 0, launches_bwd = 0;  // the kernels each pass launches

  // Forward time of the ops backward repeats under selective and under full
  // recomputation (layer_plan.hpp's `recomputed`), summed as forward() sums them.
  double recompute_selective = 0;
  double recompute_full = 0;
  double recompute_op = 0;    // Checkpointing::op: its shares of the ops (recompute_share)
  double recompute_dots = 0;  // Checkpointing::dots: the element-wise ops

  double forward() const { return gemm_fwd + attention_fwd + elementwise_fwd; }
  double backward() const { return gemm_bwd + attention_bwd + elementwise_bwd; }
  double backward_weight() const { return gemm_weight_bwd; }
  double backward_input() const { return backward() - gemm_weight_bwd; }
  // Forward work repeated in backward under the checkpointing policy.
  double recompute(Checkpointing c) const {
    switch (c) {
      case Checkpointing::full: return recompute_full;
      case Checkpointing::selective: return recompute_selective;
      case Checkpointing::op: return recompute_op;
      case Checkpointing::dots: return recompute_dots;
      case Checkpointing::none: break;
    }
    return 0.0;
  }
};

// The time of a plan's ops on one rank: its GEMMs (backward: input and weight gradients),
// its attention core (standard or flash), its memory-bound kernels. Tensor collectives
// are not included (collective.hpp costs them). With the whole forward it sums the forward
// of the ops each checkpointing policy recomputes (LayerTime::recompute). A layer's plan
// also carries the host's fixed work per layer (GpuProfile::layer_overhead_fwd/_bwd) in its
// element-wise parts, and the forward's again under full recomputation.
LayerTime plan_time(const GpuProfile& gpu, const LayerPlan& plan, Precision p, bool flash_attention);
// plan_time of a transformer layer without sequence parallelism.
LayerTime layer_time(const GpuProfile& gpu, const ModelSpec& m, Precision p,
                     double sequences, int tensor_degree, bool flash_attention);

// The standard attention core's batched GEMMs (Q K^T, scores x V) run at `efficiency`
// (score_bmm_efficiency, quoted at head_dim 128) scaled by a factor that falls with the
// contraction head_dim: (d / (d + 64)) / (128 / 192), 1 at d = 128. The one rule: the
// prediction applies it (score_bmm_efficiency_at) and calibration's fit divides it out
// (score_bmm_head_dim_scale, the factor alone).
double score_bmm_efficiency_at(double efficiency, double head_dim);
double score_bmm_head_dim_scale(double head_dim);

// Embedding lookup (forward) and LM head + loss (forward and backward) for a micro-batch.
// logits_weight_bwd: of logits_bwd, the head's weight gradients (the W of a split
// backward); the embedding's backward (a scatter into the table) stays in B.
struct HeadTime {
  double embedding_fwd = 0, embedding_bwd = 0;
  double logits_fwd = 0, logits_bwd = 0;
  double logits_weight_bwd = 0;
};
HeadTime head_time(const GpuProfile& gpu, const ModelSpec& m, const PlanConfig& c);
// The same from the embedding and head plans at `c`, already built.
HeadTime head_time(const GpuProfile& gpu, const LayerPlan& embedding, const LayerPlan& head, const PlanConfig& c);
HeadTime head_time(const GpuProfile& gpu, const ModelSpec& m, Precision p, double sequences,
                   int tensor_degree);

// Memory traffic of an optimizer step over `params` parameters: the gradient read (at
// `gradient_bytes` an element: Job::gradient_bytes_per_element, 4 under
// grad_reduce_in_fp32; < 0 = the training precision's), the fp32 master weight and the
// moments (`moment_bytes` an element: TrainingConfig::moment_bytes) read and written, the
// 16-bit weight written.
double optimizer_bytes(Optimizer o, Precision p, double params, double gradient_bytes = -1, double moment_bytes = 4.0);
// Optimizer step over `params` local parameters (memory-bound), as the stack runs it
// (TrainingConfig::optimizer_impl): `fused`, one pass over optimizer_bytes; `torch` with
// mixed precision, the 16-bit gradients converted to fp32 first and the fp32 masters copied
// back to the 16-bit weights after, a copy kernel per tensor each (`tensors` of them),
// around the fused kernel's pass, each copy group floored by the host's dispatch.
double optimizer_time(const GpuProfile& gpu, const TrainingConfig& t, double params, int tensors,
                      double gradient_bytes = -1);
// Its parts: the optimizer's own kernel and the conversions (torch only; with the host's
// dispatch floor).
struct OptimizerTime {
  double step = 0, conversions = 0;
};
OptimizerTime optimizer_times(const GpuProfile& gpu, const TrainingConfig& t, double params, int tensors,
                              double gradient_bytes = -1);
// The same step offloaded to the host (offload_optimizer): every rank of the node steps
// at once over the host's memory, host.memory_bw_GBps shared by gpus_per_node ranks.
double host_optimizer_time(const InstanceType& inst, const TrainingConfig& t, double params,
                           double gradient_bytes = -1);

}  // namespace partune
