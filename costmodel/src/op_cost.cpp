#include "partune/costmodel/op_cost.hpp"

#include <algorithm>
#include <cmath>

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

double gemm_time(const GpuProfile& gpu, Precision p, double m, double n, double k, double batch) {
  const double flops = 2.0 * m * n * k * batch;
  const double compute = flops / (gpu.peak_flops(p) * gemm_efficiency(gpu, m, n, k));
  const double bytes = (m * k + k * n + m * n) * bytes_per_element(p) * batch;
  return std::max(compute, memory_bound_time(gpu, bytes)) + gpu.kernel_overhead;
}

namespace {

// A GEMM Y[m x n] = X[m x k] W[k x n]: backward computes dX = dY W^T (m x k x n) and
// dW = X^T dY (k x n x m).
void add_gemm(const GpuProfile& gpu, Precision p, const PlanOp& op, LayerTime& lt) {
  lt.gemm_fwd += gemm_time(gpu, p, op.m, op.n, op.k);
  lt.gemm_bwd += gemm_time(gpu, p, op.m, op.k, op.n) + gemm_time(gpu, p, op.k, op.n, op.m);
}

// The attention core over op.m score elements (b x heads/t x s x s) at head_dim op.k.
void add_attention(const GpuProfile& gpu, Precision p, const PlanOp& op, bool flash, LayerTime& lt) {
  const double peak = gpu.peak_flops(p), d = op.k;
  if (flash) {
    // Causal FlashAttention does half the score FLOPs; backward is 2.5x forward
    // (FlashAttention's own accounting).
    const double rate = peak * gpu.attention.flash_efficiency;
    lt.attention_fwd += 0.5 * op.flops / rate + gpu.kernel_overhead;
    lt.attention_bwd += 2.5 * 0.5 * op.flops / rate + gpu.kernel_overhead;
    return;
  }
  // Batched GEMMs at an efficiency that falls with head_dim (the contraction of QK^T),
  // plus passes over the scores: scale, mask, softmax, dropout.
  const double eff = gpu.attention.score_bmm_efficiency * (d / (d + 64.0)) / (128.0 / 192.0);
  const double rate = peak * std::min(eff, gpu.gemm.max_efficiency);
  lt.attention_fwd += op.flops / rate + memory_bound_time(gpu, op.m * gpu.attention.score_bytes_fwd) +
                      4 * gpu.kernel_overhead;
  lt.attention_bwd += 2.0 * op.flops / rate + memory_bound_time(gpu, op.m * gpu.attention.score_bytes_bwd) +
                      8 * gpu.kernel_overhead;
}

}  // namespace

LayerTime plan_time(const GpuProfile& gpu, const LayerPlan& plan, Precision p, bool flash_attention) {
  LayerTime lt;
  double bytes_fwd = 0, bytes_bwd = 0;
  int kernels_fwd = 0, kernels_bwd = 0;
  for (const PlanOp& op : plan.ops) {
    switch (op.kind) {
      case PlanOpKind::gemm: add_gemm(gpu, p, op, lt); break;
      case PlanOpKind::attention_core: add_attention(gpu, p, op, flash_attention, lt); break;
      case PlanOpKind::memory_bound:
        bytes_fwd += op.bytes;
        bytes_bwd += op.backward_bytes;
        kernels_fwd += op.kernels;
        kernels_bwd += op.backward_kernels;
        break;
      case PlanOpKind::tensor_comm: break;  // collectives are costed by collective.hpp
    }
  }
  // The memory-bound kernels stream their bytes at HBM speed and each pays the
  // small-kernel floor.
  if (kernels_fwd > 0) lt.elementwise_fwd = memory_bound_time(gpu, bytes_fwd) + kernels_fwd * gpu.kernel_overhead;
  if (kernels_bwd > 0) lt.elementwise_bwd = memory_bound_time(gpu, bytes_bwd) + kernels_bwd * gpu.kernel_overhead;
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

HeadTime head_time(const GpuProfile& gpu, const ModelSpec& m, const PlanConfig& c) {
  const LayerTime embedding = plan_time(gpu, embedding_plan(m, c), c.precision, false);
  const LayerTime head = plan_time(gpu, head_plan(m, c), c.precision, false);
  HeadTime ht;
  ht.embedding_fwd = embedding.forward();
  ht.embedding_bwd = embedding.backward();
  ht.logits_fwd = head.forward();
  ht.logits_bwd = head.backward();
  return ht;
}

HeadTime head_time(const GpuProfile& gpu, const ModelSpec& m, Precision p, double sequences,
                   int tensor_degree) {
  PlanConfig c;
  c.sequences = sequences;
  c.tensor_degree = tensor_degree;
  c.precision = p;
  return head_time(gpu, m, c);
}

double optimizer_time(const GpuProfile& gpu, Optimizer o, Precision p, double params) {
  const bool mixed = p == Precision::fp16 || p == Precision::bf16;
  // Adam reads the gradient, reads and writes the fp32 master weight and both moments,
  // and writes the 16-bit weight; SGD with momentum has one moment.
  const double grad = bytes_per_element(p);
  const double state = (o == Optimizer::adam ? 3.0 : 2.0) * 4.0;
  const double bytes = params * (grad + 2.0 * state + (mixed ? 2.0 : 0.0));
  return memory_bound_time(gpu, bytes) + 4 * gpu.kernel_overhead;
}

}  // namespace partune
