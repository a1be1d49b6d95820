#pragma once
// Least-squares fits of the cost model's parameters to micro-benchmark measurements
// (`partune calibrate`). Measurements in, parameters and residuals out; no LibTorch, no
// I/O, so every fit can be checked on synthetic data with known parameters.
//
// Every fit minimises the squared *relative* error of the predicted time,
// sum_i ((t_pred_i - t_i) / t_i)^2: the sweeps span 7 decades of time (8-byte messages
// to 128 MiB), and an absolute least-squares fit would let the largest sizes decide
// everything. Each model below is linear in its unknowns once written in reciprocal
// rates (1/efficiency, 1/bandwidth), so the fit is one linear solve (Eigen); unknowns
// that must be non-negative are fixed at zero and the rest refitted when the free fit
// makes them negative.
#include <string>
#include <utility>
#include <vector>

#include "partune/costmodel/op_cost.hpp"

namespace partune::calibration {

// How well a fitted model reproduces the samples it was fitted to.
struct Residual {
  double rms_relative = 0;  // sqrt(mean(((t_pred - t) / t)^2))
  double max_relative = 0;  // max |t_pred - t| / t
  int samples = 0;
};

// Whether a fitted efficiency can go into a profile: it must be finite and inside (0, 1]
// (an efficiency past 1 means the timings or the peak are wrong, and clamping it would
// write a number nobody measured), and the fit must reproduce its samples within
// `max_rms_relative`. Returns why not, naming the fit ("gemm_1_thread: max_efficiency
// fitted at 7.66, outside (0, 1]"), or "" when it can.
// `max_efficiency` > 1 admits a kernel at the peak it is measured against, which is itself
// measured (a rate at the peak lands on either side of it).
std::string efficiency_fit_problem(const std::string& fit, const std::string& key, double efficiency,
                                   const Residual& residual, double max_rms_relative, double max_efficiency = 1.0);

// One timed m x n x k matrix product.
struct GemmSample {
  double m = 0, n = 0, k = 0;
  double seconds = 0;
};
// gemm_time() with tile 1 and sm_count 1 (a CPU core has no waves):
//   t = 2mnk / (peak * max_efficiency * k / (k + k_half)) + kernel_overhead
// i.e. t = 2mnk/peak * (a + b/k) + overhead with a = 1/max_efficiency and
// b = k_half/max_efficiency, linear in (a, b): max_efficiency = 1/a, k_half = b/a. The overhead is an input (fitted on the
// element-wise kernels), as the estimator adds the same overhead to every kernel.
struct GemmFit {
  double max_efficiency = 0;
  double k_half = 0;
  Residual residual;
};
GemmFit fit_gemm(const std::vector<GemmSample>& samples, double peak_flops, double kernel_overhead);

// One timed memory-bound kernel moving `bytes` (read + written).
struct MemorySample {
  std::string kernel;
  double bytes = 0;
  double seconds = 0;
};
// t = kernel_overhead + bytes / bandwidth[kernel]: one overhead shared by every kernel
// (the per-op floor the estimator adds to each kernel), one bandwidth per kernel.
struct MemoryFit {
  double kernel_overhead = 0;                                // s
  std::vector<std::pair<std::string, double>> bandwidth;     // bytes/s per kernel, first-seen order
  Residual residual;
  double bandwidth_of(const std::string& kernel) const;      // throws std::out_of_range
};
MemoryFit fit_memory(const std::vector<MemorySample>& samples);

// The estimator's hbm_efficiency: the element-wise kernels' achieved bandwidths combined
// as the time-weighted (harmonic) mean over the bytes each kernel moves per token, over
// the reference bandwidth hbm_bw. weights: kernel name -> bytes per token.
double weighted_memory_efficiency(const MemoryFit& fit, const std::vector<std::pair<std::string, double>>& weights,
                                  double hbm_bw);

// How a GPU profile takes its memory-bound measurements (calibrate's rule since
// 2026-11-29, and validate --replay's for profiles written before it): the shared
// intercept of back-to-back eager calls is the host's dispatch of one kernel (`dispatch`;
// the device's gap between queued kernels, kernel_overhead, stays as `g` has it); the
// LayerNorm, copy and broadcast-multiply bandwidths (bytes/s by kernel name) over hbm_bw the
// norm, copy and strided classes' rates; a kernel not measured leaves `g`'s rate.
void apply_memory_measurements(GpuProfile& g, double intercept,
                               const std::vector<std::pair<std::string, double>>& bandwidth);

// One timed transfer or collective of `bytes` (the cost model's size convention:
// all_reduce the buffer, all_gather the full output, send_recv the message).
struct TransferSample {
  double bytes = 0;
  double seconds = 0;
  // The collective's shape on its group under the cost model's formula:
  //   t = latency_steps * latency + byte_factor * bytes / bandwidth
  // (two-rank ring all-reduce: 2 and 1; all-gather: 1 and 1/2; send/recv: 1 and 1).
  double latency_steps = 1;
  double byte_factor = 1;
};
struct AlphaBetaFit {
  double latency = 0;    // s per step (alpha)
  double bandwidth = 0;  // bytes/s (1 / beta)
  double min_bytes = 0, max_bytes = 0;
  Residual residual;
};
// Throws std::invalid_argument with fewer than 2 samples or when the times do not grow
// with the size at all (no bandwidth to fit).
AlphaBetaFit fit_alpha_beta(const std::vector<TransferSample>& samples);
// The latency alone, for a range whose times do not grow with the size (small messages
// that only pay the call's fixed cost): t = latency_steps * latency, least squares on the
// relative error; bandwidth 0 = not a term of this fit. Throws with no timed sample.
AlphaBetaFit fit_latency_only(const std::vector<TransferSample>& samples);
// The samples with min_bytes <= bytes <= max_bytes.
std::vector<TransferSample> in_size_range(const std::vector<TransferSample>& samples, double min_bytes,
                                          double max_bytes);

// One timed batched product of the attention scores (Q K^T or A V): `batch` products of
// m x n x k, where head_dim is the contraction of Q K^T.
struct BmmSample {
  double batch = 0, m = 0, n = 0, k = 0;
  double head_dim = 0;
  double seconds = 0;
};
// layer_time()'s standard attention: the batched GEMMs run at
//   peak * score_bmm_efficiency * (d / (d + 64)) / (128 / 192)
// (the key is quoted at head_dim 128), plus one kernel overhead per product. Fits the
// key itself, so that the estimator's scaling reproduces the measured rate at every d.
struct ScoreBmmFit {
  double score_bmm_efficiency = 0;
  Residual residual;
};
ScoreBmmFit fit_score_bmm(const std::vector<BmmSample>& samples, double peak_flops, double kernel_overhead);
// The estimator's head-dim scaling of score_bmm_efficiency: op_cost.hpp's one rule, which
// the fit divides out and the prediction multiplies in.
using partune::score_bmm_head_dim_scale;

// One FlashAttention forward + backward, causal, over batch_heads heads of seq tokens.
struct FlashSample {
  double batch_heads = 0, seq = 0, head_dim = 0;
  double seconds = 0;
};
// layer_time()'s FlashAttention: forward 0.5 F / rate + o and backward 2.5 times its FLOPs,
// F = 4 batch_heads seq^2 head_dim (Q K^T and the context, unmasked), rate = peak times
// the kernel's curve (hardware.hpp's FlashCurve) at the sample's seq and head dim:
// t = 1.75 F / (peak curve.at(seq, head_dim)) + 2 o. The head dim's half-point is given
// (the samples may all be at one head dim); flash_efficiency (the curve's max_efficiency)
// and seq_half are fitted in relative least squares: flash_efficiency in closed form for
// each seq_half of a one-token grid up to 64k. Samples at one sequence length give a flat
// curve (seq_half 0).
struct FlashFit {
  double flash_efficiency = 0;
  double seq_half = 0, head_dim_half = 0;
  Residual residual;
  FlashCurve curve() const { return {flash_efficiency, seq_half, head_dim_half}; }
};
FlashFit fit_flash(const std::vector<FlashSample>& samples, double peak_flops, double kernel_overhead,
                   double head_dim_half = 0);
// The kernel LibTorch's fused scaled_dot_product_attention runs for causal bf16 training on
// a GPU of this compute capability: cuDNN's on Hopper and later (LibTorch 2.11; the recorded
// flash_attention_sdpa_check runs name cudnn_attention on the H100 and the H200), FlashAttention-2
// before.
AttentionKernel sdpa_kernel(int compute_major);
// A profile's own flash kernel from calibrate's fit of it: gpu.attention.kernel, its curve.
void apply_flash_fit(GpuProfile& g, AttentionKernel kernel, const FlashFit& fit);
// A timed forward + backward whose backward also accumulated the query, key and value
// gradients into their leaves' .grad (calibrate before 2026-11-29: three element-wise adds
// of batch_heads x seq x head_dim bf16 elements, each reading two tensors and writing one):
// the samples with that time taken off at the run's measured add bandwidth (bytes/s).
std::vector<FlashSample> without_gradient_accumulation(std::vector<FlashSample> samples, double add_bandwidth);

}  // namespace partune::calibration
