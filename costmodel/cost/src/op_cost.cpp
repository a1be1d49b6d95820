#include "partune/costmodel/op_cost.hpp"


#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "partune/costmodel/enum_names.hpp"

namespace partune {

double gemm_efficiency(const GpuProfile& gpu, double m, double n, double k) {
  const GemmEfficiency& g = gpu.gemm;
  const double tiles_m = std::ceil(m / g.tile), tiles_n = std::ceil(n / g.tile);
  const double tiles = tiles_m * tiles_n;
  const double waves = std::ceil(tiles / g.sm_count);
  const double occupancy = tiles / (waves * g.sm_count);
  const double fill = (m / (tiles_m * g.tile)) * (n / (tiles_n * g.tile));
  return g.max_efficiency * occupancy * fill * k / (k + g.k_half);
}

double memory_bound_time(const GpuProfile& gpu, double bytes) {
  return bytes / (gpu.hbm_bw * gpu.hbm_efficiency);
}

double kernel_class_efficiency(const GpuProfile& gpu, KernelClass c) {
  double own = 0;
  switch (c) {
    case KernelClass::elementwise: break;
    case KernelClass::strided:
    case KernelClass::strided_copy: own = gpu.strided_efficiency; break;
    case KernelClass::norm: own = gpu.norm_efficiency; break;
    case KernelClass::copy: own = gpu.copy_efficiency; break;
    case KernelClass::transpose: own = gpu.transpose_efficiency; break;
  }
  return own > 0 ? own : gpu.hbm_efficiency;
}

double kernel_class_time(const GpuProfile& gpu, const KernelWork& w, KernelClass c) {
  const int i = static_cast<int>(c);
  if (w.kernels[i] == 0 && w.bytes[i] == 0) return 0.0;
  return w.bytes[i] / (gpu.hbm_bw * kernel_class_efficiency(gpu, c)) + w.kernels[i] * gpu.kernel_overhead;
}

double kernel_work_time(const GpuProfile& gpu, const KernelWork& w) {
  double sum = 0;
  for (int i = 0; i < kKernelClasses; ++i) sum += kernel_class_time(gpu, w, static_cast<KernelClass>(i));
  return sum;
}

namespace {

// The GEMM format's max_efficiency over the bf16 one (its own fit, or 1).
double format_scale(const GemmEfficiency& g, Precision p) {
  const double own = p == Precision::fp4 ? g.fp4_max_efficiency
                     : p == Precision::fp8 || p == Precision::mxfp8 ? g.fp8_max_efficiency
                                                                     : 0.0;
  return own > 0 ? own / g.max_efficiency : 1.0;
}

}  // namespace

double gemm_time(const GpuProfile& gpu, Precision p, double m, double n, double k, double batch) {
  const double flops = 2.0 * m * n * k * batch;
  const double compute = flops / (gpu.peak_flops(p) * gemm_efficiency(gpu, m, n, k) * format_scale(gpu.gemm, p));
  const double bytes = (m * k + k * n + m * n) * bytes_per_element(p) * batch;
  return std::max(compute, memory_bound_time(gpu, bytes)) + gpu.kernel_overhead;
}

double score_bmm_efficiency_at(double efficiency, double head_dim) {
  return efficiency * (head_dim / (head_dim + 64.0)) / (128.0 / 192.0);
}
double score_bmm_head_dim_scale(double head_dim) { return score_bmm_efficiency_at(1.0, head_dim); }

namespace {

// One op's forward and backward seconds; of backward, the weight gradients'.
struct OpTime {
  double fwd = 0, bwd = 0, weight = 0;
};

// A GEMM Y[m x n] = X[m x k] W[k x n]: backward computes dX = dY W^T (m x k x n) and
// dW = X^T dY (k x n x m).
OpTime gemm_op_time(const GpuProfile& gpu, Precision p, const PlanOp& op) {
  // (`batch` products: a rank's experts, each its own kernel.)
  // (The operands' casts of an 8- or 4-bit format are the op's kernel work: layer_plan.hpp.)
  const double b = op.batch;
  const double weight = b * gemm_time(gpu, p, op.k, op.n, op.m);
  return {b * gemm_time(gpu, p, op.m, op.n, op.k), b * gemm_time(gpu, p, op.m, op.k, op.n) + weight, weight};
}

// The flash kernel's efficiency on this op: the job's kernel (the profile's own unless
// attention_impl names another) along its curve at the op's keys and head dim.
double flash_rate(const GpuProfile& gpu, const PlanOp& op) {
  const AttentionKernel k = op.attention_kernel.value_or(gpu.attention.kernel);
  const FlashCurve curve = gpu.attention.curve(k);
  if (!(curve.max_efficiency > 0))
    throw std::invalid_argument(fmt::format("training.attention_impl: {} has no measured curve on {} (gpu.attention "
                                            "has {}{})",
                                            enum_name(k), gpu.name, enum_name(gpu.attention.kernel),
                                            measured_kernels(gpu.attention)));
  return curve.at(op.seq, op.k);
}

// The attention core over op.m score elements (b x heads/t x s x s) at head_dim op.k.
OpTime attention_op_time(const GpuProfile& gpu, Precision p, const PlanOp& op, bool flash) {
  const double peak = gpu.peak_flops(p), d = op.k;
  if (flash) {
    // Causal FlashAttention does half the score FLOPs; backward is 2.5x forward
    // (FlashAttention's own accounting).
    const double rate = peak * flash_rate(gpu, op), done = kFlashCausalFlopFraction * op.flops;
    return {done / rate + gpu.kernel_overhead, kFlashBackwardFactor * done / rate + gpu.kernel_overhead};
  }
  // Batched GEMMs at an efficiency that falls with head_dim (the contraction of QK^T),
  // plus passes over the scores: scale, mask, softmax, dropout.
  const double eff = score_bmm_efficiency_at(gpu.attention.score_bmm_efficiency, d);
  const double rate = peak * std::min(eff, gpu.gemm.max_efficiency);
  // (Every score, a sliding window's masked ones too.)
  const double computed = op.flops / (op.score_fraction > 0 ? op.score_fraction : 1.0);
  if (op.score_passes_in_work)  // the passes are the op's kernel work (layer_plan.hpp)
    return {computed / rate + 2 * gpu.kernel_overhead, 2.0 * computed / rate + 4 * gpu.kernel_overhead};
  return {computed / rate + memory_bound_time(gpu, op.m * gpu.attention.score_bytes_fwd) + 4 * gpu.kernel_overhead,
          2.0 * computed / rate + memory_bound_time(gpu, op.m * gpu.attention.score_bytes_bwd) +
              8 * gpu.kernel_overhead};
}

// The time of a set of ops in one pass, by part: GEMMs, the attention core, the
// memory-bound kernels by class, and the host's dispatch left idle.
struct PassTime {
  double gemm = 0, attention = 0, idle = 0;
  long launches = 0;
  std::array<double, kKernelClasses> by_class{};
  double memory() const {
    double sum = 0;
    for (double t : by_class) sum += t;
    return sum;
  }
  double total() const { return gemm + attention + memory() + idle; }
};

// Kernels a GEMM op and the attention core launch in a pass (FlashAttention's backward:
// the kernel, the output-gradient dot product and dq's conversion; the standard core:
// its batched GEMMs and score passes).
int compute_kernels(const PlanOp& op, bool forward, bool flash) {
  if (op.kind == PlanOpKind::gemm) return static_cast<int>(op.batch) * (forward ? 1 : 2);
  if (op.kind != PlanOpKind::attention_core) return 0;
  if (flash) return forward ? 1 : 3;
  return (forward ? 2 : 4) * (op.score_passes_in_work ? 1 : 2);  // (the passes' own: in the work)
  return 0;
}

// Adds one op's pass: its compute time and memory-bound kernels on the device, floored by
// the host's launches of all its kernels (the host runs ahead of long kernels, but an op
// of short ones waits for it).
void add_op(const GpuProfile& gpu, const PlanOp& op, double compute, const KernelWork& work, int compute_kernels,
            bool host_dispatch, PassTime& pass) {
  if (op.kind == PlanOpKind::gemm) pass.gemm += compute;
  if (op.kind == PlanOpKind::attention_core) pass.attention += compute;
  double device = compute;
  for (int i = 0; i < kKernelClasses; ++i) {
    const double t = kernel_class_time(gpu, work, static_cast<KernelClass>(i));
    pass.by_class[i] += t;
    device += t;
  }
  const int launches = compute_kernels + work.total_kernels();
  pass.launches += launches;
  if (host_dispatch && gpu.dispatch > 0) pass.idle += std::max(0.0, launches * gpu.dispatch - device);
}

}  // namespace

// `share` of an op's forward, as the separate kernels a fused op stands for (the matmuls
// Checkpointing::op repeats of a fused GEMM): its compute, work and launches scaled, one
// launch at least.
void add_op_share(const GpuProfile& gpu, const PlanOp& op, double share, double compute, const KernelWork& work,
                  int compute_kernels, bool host_dispatch, PassTime& pass) {
  if (share <= 0) return;
  if (share >= 1) return add_op(gpu, op, compute, work, compute_kernels, host_dispatch, pass);
  KernelWork part;
  for (int i = 0; i < kKernelClasses; ++i)
    if (work.kernels[i] > 0 || work.bytes[i] > 0)
      part.add(static_cast<KernelClass>(i), share * work.bytes[i], static_cast<int>(std::ceil(share * work.kernels[i])));
  add_op(gpu, op, share * compute, part, std::max(1, static_cast<int>(std::ceil(share * compute_kernels))), host_dispatch,
         pass);
}

LayerTime plan_time(const GpuProfile& gpu, const LayerPlan& plan, Precision p, bool flash_attention) {
  PassTime fwd, bwd, selective, full, by_op, by_dots;  // the last four: the forward of the recomputed ops
  double weight = 0;                   // the GEMMs' weight gradients, of bwd
  const bool dispatch = plan.host_dispatch;
  for (const PlanOp& op : plan.ops) {
    OpTime t;
    switch (op.kind) {
      case PlanOpKind::gemm: t = gemm_op_time(gpu, p, op); break;
      case PlanOpKind::attention_core: t = attention_op_time(gpu, non_gemm_precision(p), op, flash_attention); break;
      case PlanOpKind::memory_bound: break;  // its kernels are op.forward_work / backward_work
      case PlanOpKind::tensor_comm:
      case PlanOpKind::expert_comm:
      case PlanOpKind::context_comm: continue;  // collectives are costed by collective.hpp
    }
    const int kf = compute_kernels(op, true, flash_attention), kb = compute_kernels(op, false, flash_attention);
    add_op(gpu, op, t.fwd, op.forward_work, kf, dispatch, fwd);
    add_op(gpu, op, t.bwd, op.backward_work, kb, dispatch, bwd);
    weight += t.weight;
    if (recomputed(op, Checkpointing::selective)) add_op(gpu, op, t.fwd, op.forward_work, kf, dispatch, selective);
    if (recomputed(op, Checkpointing::full)) add_op(gpu, op, t.fwd, op.forward_work, kf, dispatch, full);
    add_op_share(gpu, op, recompute_share(op, Checkpointing::op), t.fwd, op.forward_work, kf, dispatch, by_op);
    add_op_share(gpu, op, recompute_share(op, Checkpointing::dots), t.fwd, op.forward_work, kf, dispatch, by_dots);
  }
  LayerTime lt;
  lt.gemm_fwd = fwd.gemm;
  lt.attention_fwd = fwd.attention;
  lt.elementwise_fwd = fwd.memory() + fwd.idle;
  lt.gemm_bwd = bwd.gemm;
  lt.attention_bwd = bwd.attention;
  lt.elementwise_bwd = bwd.memory() + bwd.idle;
  lt.class_fwd = fwd.by_class;
  lt.class_bwd = bwd.by_class;
  lt.idle_fwd = fwd.idle;
  lt.idle_bwd = bwd.idle;
  lt.launches_fwd = fwd.launches;
  lt.launches_bwd = bwd.launches;
  lt.gemm_weight_bwd = weight;
  lt.recompute_selective = selective.total();
  lt.recompute_full = full.total();
  lt.recompute_op = by_op.total();
  lt.recompute_dots = by_dots.total();
  if (plan.part == PlanPart::layer) {  // the host's fixed work per layer and micro-batch
    lt.elementwise_fwd += gpu.layer_overhead_fwd;
    lt.elementwise_bwd += gpu.layer_overhead_bwd;
    lt.recompute_full += gpu.layer_overhead_fwd;  // the whole forward again
  }
  return lt;
}

LayerTime layer_time(const GpuProfile& gpu, const ModelSpec& m, Precision p, double sequences,
                     int tensor_degree, bool flash_attention) {
  PlanConfig c;
  c.sequences = sequences;
  c.tensor_degree = tensor_degree;
  c.flash_attention = flash_attention;
  c.precision = p;
  return plan_time(gpu, transformer_layer_plan(m, c), p, flash_attention);
}

HeadTime head_time(const GpuProfile& gpu, const LayerPlan& embedding, const LayerPlan& head, const PlanConfig& c) {
  const LayerTime lookup = plan_time(gpu, embedding, c.precision, false);
  // (The head plan's attention cores are its multi-token-prediction layers'.)
  const LayerTime logits = plan_time(gpu, head, c.precision, c.flash_attention);
  HeadTime ht;
  ht.embedding_fwd = lookup.forward();
  ht.embedding_bwd = lookup.backward();
  ht.logits_fwd = logits.forward();
  ht.logits_bwd = logits.backward();
  ht.logits_weight_bwd = logits.backward_weight();
  return ht;
}

HeadTime head_time(const GpuProfile& gpu, const ModelSpec& m, const PlanConfig& c) {
  return head_time(gpu, embedding_plan(m, c), head_plan(m, c), c);
}

HeadTime head_time(const GpuProfile& gpu, const ModelSpec& m, Precision p, double sequences,
                   int tensor_degree) {
  PlanConfig c;
  c.sequences = sequences;
  c.tensor_degree = tensor_degree;
  c.precision = p;
  return head_time(gpu, m, c);
}

double optimizer_bytes(Optimizer o, Precision p, double params, double gradient_bytes, double moment_bytes) {
  const bool mixed = mixed_precision(p);
  // Adam reads the gradient, reads and writes the fp32 master weight and both moments,
  // and writes the 16-bit weight; SGD with momentum has one moment.
  const double grad = gradient_bytes >= 0 ? gradient_bytes : bytes_per_element(p);
  const double state = 4.0 + (o == Optimizer::adam ? 2.0 : 1.0) * moment_bytes;
  return params * (grad + 2.0 * state + (mixed ? 2.0 : 0.0));
}

OptimizerTime optimizer_times(const GpuProfile& gpu, const TrainingConfig& t, double params, int tensors,
                              double gradient_bytes) {
  const Precision p = t.precision;
  if (t.optimizer_impl == OptimizerImpl::fused || !mixed_precision(p))
    return {memory_bound_time(gpu, optimizer_bytes(t.optimizer, p, params, gradient_bytes, t.moment_bytes())) +
                4 * gpu.kernel_overhead,
            0};
  // torch.optim's fused kernel reads fp32 gradients and steps the fp32 masters in place;
  // the conversions read one format and write the other, a copy a tensor each way.
  const double eb = bytes_per_element(p), state = (t.optimizer == Optimizer::adam ? 3.0 : 2.0) * 4.0;
  // The foreach step (Adam): m *= b1, m += (1 - b1) g, v *= b2, v += (1 - b2) g g, d = sqrt(v),
  // d /= c, d += eps (8 bytes an element each but the two that read g: 12), p -= lr m / d
  // (read three, write one: 16): 80 bytes a parameter; SGD's momentum and update, 28.
  const double foreach_bytes = t.optimizer == Optimizer::adam ? 80.0 : 28.0;
  const bool foreach = t.optimizer_impl == OptimizerImpl::foreach;
  const bool loop = t.optimizer_impl == OptimizerImpl::per_tensor;
  const double host = t.cuda_graphs ? 0.0 : tensors * gpu.dispatch;  // a kernel a tensor
  double step = memory_bound_time(gpu, params * (foreach || loop ? foreach_bytes : 4.0 + 2.0 * state));
  if (loop) step = std::max(step + 10 * tensors * gpu.kernel_overhead, 10 * host);
  else step += (foreach ? 32 : 4) * gpu.kernel_overhead;
  // To fp32 through LibTorch's unrolled (non-vectorised) converting copy, back to the 16-bit
  // format through its vectorised one (the profiled kernels).
  KernelWork to_fp32, back;
  to_fp32.add(KernelClass::strided_copy, params * (eb + 4.0), tensors);
  back.add(KernelClass::copy, params * (eb + 4.0), tensors);
  return {step, std::max(kernel_work_time(gpu, to_fp32), host) + std::max(kernel_work_time(gpu, back), host)};
}

double optimizer_time(const GpuProfile& gpu, const TrainingConfig& t, double params, int tensors,
                      double gradient_bytes) {
  const OptimizerTime o = optimizer_times(gpu, t, params, tensors, gradient_bytes);
  return o.step + o.conversions;
}

double host_optimizer_time(const InstanceType& inst, const TrainingConfig& t, double params, double gradient_bytes) {
  if (inst.host_memory_bw <= 0) return 0.0;  // check_job refuses offload_optimizer without it
  return optimizer_bytes(t.optimizer, t.precision, params, gradient_bytes, t.moment_bytes()) * inst.gpus_per_node /
         inst.host_memory_bw;
}

}  // namespace partune
