#include "partune/costmodel/op_cost.hpp"

#include <algorithm>
#include <cmath>

namespace partune {

namespace {

// Kernels launched per layer that are not GEMMs (norms, activation, dropout, residual
// adds, softmax, copies); each pays the small-kernel floor.
constexpr double kElementwiseKernelsFwd = 10;
constexpr double kElementwiseKernelsBwd = 20;
}  // namespace

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

// Forward GEMM Y[m x n] = X[m x k] W[k x n]; backward computes dX = dY W^T (m x k x n)
// and dW = X^T dY (k x n x m).
static void add_linear(const GpuProfile& gpu, Precision p, double tokens, double in, double out,
                       LayerTime& lt) {
  lt.gemm_fwd += gemm_time(gpu, p, tokens, out, in);
  lt.gemm_bwd += gemm_time(gpu, p, tokens, in, out) + gemm_time(gpu, p, in, out, tokens);
}

LayerTime layer_time(const GpuProfile& gpu, const ModelSpec& m, Precision p, double sequences,
                     int tensor_degree, bool flash_attention) {
  const double t = tensor_degree, s = m.seq_len, h = m.hidden, f = m.ffn_hidden;
  const double tokens = sequences * s;
  const double kv = static_cast<double>(m.kv_heads) * m.head_dim();
  LayerTime lt;
  add_linear(gpu, p, tokens, h, (h + 2 * kv) / t, lt);  // QKV, column-parallel
  add_linear(gpu, p, tokens, h / t, h, lt);             // projection, row-parallel
  add_linear(gpu, p, tokens, h, f / t, lt);             // fc1, column-parallel
  add_linear(gpu, p, tokens, f / t, h, lt);             // fc2, row-parallel

  const double heads = m.heads / t, d = m.head_dim();
  const double score_flops_fwd = 4.0 * sequences * s * s * h / t;  // QK^T and AV
  const double peak = gpu.peak_flops(p);
  if (flash_attention) {
    // Causal FlashAttention does half the score FLOPs; backward is 2.5x forward
    // (FlashAttention's own accounting).
    const double rate = peak * gpu.attention.flash_efficiency;
    lt.attention_fwd = 0.5 * score_flops_fwd / rate + gpu.kernel_overhead;
    lt.attention_bwd = 2.5 * 0.5 * score_flops_fwd / rate + gpu.kernel_overhead;
  } else {
    // Batched GEMMs at an efficiency that falls with head_dim (the contraction of QK^T),
    // plus passes over the (b * heads) x s x s scores: scale, mask, softmax, dropout.
    const double eff = gpu.attention.score_bmm_efficiency * (d / (d + 64.0)) / (128.0 / 192.0);
    const double rate = peak * std::min(eff, gpu.gemm.max_efficiency);
    const double scores = sequences * heads * s * s;
    lt.attention_fwd = score_flops_fwd / rate +
                       memory_bound_time(gpu, scores * gpu.attention.score_bytes_fwd) +
                       4 * gpu.kernel_overhead;
    lt.attention_bwd = 2.0 * score_flops_fwd / rate +
                       memory_bound_time(gpu, scores * gpu.attention.score_bytes_bwd) +
                       8 * gpu.kernel_overhead;
  }

  // Per token, forward: two layer norms read and write h (8h bytes), GeLU reads and
  // writes f/t (4f/t), two bias-dropout-residual adds read two inputs, write the output
  // and a 1-byte mask (14h). Backward moves about twice as much.
  const double eb = bytes_per_element(p) / 2.0;
  const double fwd_bytes = tokens * (22.0 * h + 4.0 * f / t) * eb;
  lt.elementwise_fwd = memory_bound_time(gpu, fwd_bytes) + kElementwiseKernelsFwd * gpu.kernel_overhead;
  lt.elementwise_bwd = memory_bound_time(gpu, 2.0 * fwd_bytes) + kElementwiseKernelsBwd * gpu.kernel_overhead;
  return lt;
}

HeadTime head_time(const GpuProfile& gpu, const ModelSpec& m, Precision p, double sequences,
                   int tensor_degree) {
  const double t = tensor_degree, tokens = sequences * m.seq_len, h = m.hidden;
  const double v = static_cast<double>(m.vocab) / t;
  const double eb = bytes_per_element(p);
  HeadTime ht;
  ht.embedding_fwd = memory_bound_time(gpu, 2.0 * tokens * h * eb) + gpu.kernel_overhead;
  ht.embedding_bwd = memory_bound_time(gpu, 3.0 * tokens * h * eb) + gpu.kernel_overhead;
  ht.logits_fwd = gemm_time(gpu, p, tokens, v, h);
  ht.logits_bwd = gemm_time(gpu, p, tokens, h, v) + gemm_time(gpu, p, h, v, tokens);
  // Cross-entropy in fp32 over the local vocabulary slice: read logits, write
  // probabilities forward; read them and write the gradient backward.
  ht.logits_fwd += memory_bound_time(gpu, tokens * v * (eb + 4.0)) + 3 * gpu.kernel_overhead;
  ht.logits_bwd += memory_bound_time(gpu, tokens * v * (4.0 + eb)) + 2 * gpu.kernel_overhead;
  return ht;
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
