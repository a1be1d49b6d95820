#include "partune/costmodel/calibration_fit.hpp"

#include "partune/costmodel/op_cost.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace partune::calibration {

namespace {

// Solves min |A x - y|^2 with x[j] >= 0 for every j in `non_negative`: the free solution,
// then, while a constrained unknown comes out negative, the most negative one is fixed at
// zero and the rest refitted (enough for the two or three unknowns of these models).
Eigen::VectorXd solve_constrained(const Eigen::MatrixXd& A, const Eigen::VectorXd& y,
                                  const std::vector<bool>& non_negative) {
  const Eigen::Index n = A.cols();
  std::vector<bool> fixed(static_cast<std::size_t>(n), false);
  Eigen::VectorXd x = Eigen::VectorXd::Zero(n);
  for (Eigen::Index round = 0; round <= n; ++round) {
    std::vector<Eigen::Index> free;
    for (Eigen::Index j = 0; j < n; ++j)
      if (!fixed[static_cast<std::size_t>(j)]) free.push_back(j);
    if (free.empty()) return Eigen::VectorXd::Zero(n);
    Eigen::MatrixXd sub(A.rows(), static_cast<Eigen::Index>(free.size()));
    for (std::size_t c = 0; c < free.size(); ++c) sub.col(static_cast<Eigen::Index>(c)) = A.col(free[c]);
    const Eigen::VectorXd xs = sub.colPivHouseholderQr().solve(y);
    x.setZero();
    for (std::size_t c = 0; c < free.size(); ++c) x[free[c]] = xs[static_cast<Eigen::Index>(c)];
    Eigen::Index worst = -1;
    for (Eigen::Index j = 0; j < n; ++j)
      if (non_negative[static_cast<std::size_t>(j)] && x[j] < 0 && (worst < 0 || x[j] < x[worst])) worst = j;
    if (worst < 0) return x;
    fixed[static_cast<std::size_t>(worst)] = true;
  }
  return x;
}

template <class Predict, class Sample>
Residual residual_of(const std::vector<Sample>& samples, Predict predict) {
  Residual r;
  double sum = 0;
  for (const auto& s : samples) {
    const double e = (predict(s) - s.seconds) / s.seconds;
    sum += e * e;
    r.max_relative = std::max(r.max_relative, std::abs(e));
  }
  r.samples = static_cast<int>(samples.size());
  r.rms_relative = samples.empty() ? 0 : std::sqrt(sum / static_cast<double>(samples.size()));
  return r;
}

template <class Sample>
void require_timed(const std::vector<Sample>& samples, std::size_t at_least, const char* what) {
  if (samples.size() < at_least)
    throw std::invalid_argument(std::string(what) + ": need at least " + std::to_string(at_least) + " samples, got " +
                                std::to_string(samples.size()));
  for (const auto& s : samples)
    if (!(s.seconds > 0) || !std::isfinite(s.seconds))
      throw std::invalid_argument(std::string(what) + ": a sample has a non-positive or non-finite time");
}

}  // namespace

GemmFit fit_gemm(const std::vector<GemmSample>& samples, double peak_flops, double kernel_overhead) {
  require_timed(samples, 2, "GEMM fit");
  // Relative error of t_pred = F/peak * (a + b/k) + o:  (F/(peak t)) a + (F/(peak t k)) b = 1 - o/t.
  Eigen::MatrixXd A(static_cast<Eigen::Index>(samples.size()), 2);
  Eigen::VectorXd y(A.rows());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    const double x = 2.0 * s.m * s.n * s.k / (peak_flops * s.seconds);
    A(static_cast<Eigen::Index>(i), 0) = x;
    A(static_cast<Eigen::Index>(i), 1) = x / s.k;
    y[static_cast<Eigen::Index>(i)] = 1.0 - kernel_overhead / s.seconds;
  }
  const Eigen::VectorXd ab = solve_constrained(A, y, {true, true});
  if (!(ab[0] > 0)) throw std::invalid_argument("GEMM fit: the times do not determine a peak efficiency");
  GemmFit f;
  f.max_efficiency = 1.0 / ab[0];
  f.k_half = ab[1] / ab[0];
  f.residual = residual_of(samples, [&](const GemmSample& s) {
    return 2.0 * s.m * s.n * s.k / (peak_flops * f.max_efficiency * s.k / (s.k + f.k_half)) + kernel_overhead;
  });
  return f;
}

double MemoryFit::bandwidth_of(const std::string& kernel) const {
  for (const auto& [name, bw] : bandwidth)
    if (name == kernel) return bw;
  throw std::out_of_range("no fitted bandwidth for kernel '" + kernel + "'");
}

MemoryFit fit_memory(const std::vector<MemorySample>& samples) {
  require_timed(samples, 2, "memory-bound kernel fit");
  MemoryFit f;
  std::vector<std::string> kernels;
  for (const auto& s : samples)
    if (std::find(kernels.begin(), kernels.end(), s.kernel) == kernels.end()) kernels.push_back(s.kernel);
  // Unknowns: overhead, then 1/bandwidth per kernel. Relative error rows:
  //   (1/t) o + (bytes/t) u_kernel = 1.
  const auto cols = static_cast<Eigen::Index>(1 + kernels.size());
  Eigen::MatrixXd A = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(samples.size()), cols);
  Eigen::VectorXd y = Eigen::VectorXd::Ones(A.rows());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    const auto col = 1 + (std::find(kernels.begin(), kernels.end(), s.kernel) - kernels.begin());
    A(static_cast<Eigen::Index>(i), 0) = 1.0 / s.seconds;
    A(static_cast<Eigen::Index>(i), col) = s.bytes / s.seconds;
  }
  const Eigen::VectorXd x = solve_constrained(A, y, std::vector<bool>(static_cast<std::size_t>(cols), true));
  f.kernel_overhead = x[0];
  for (std::size_t j = 0; j < kernels.size(); ++j) {
    const double u = x[static_cast<Eigen::Index>(j + 1)];
    if (!(u > 0))
      throw std::invalid_argument("memory-bound kernel fit: kernel '" + kernels[j] +
                                  "' takes no longer with more bytes (measure larger tensors)");
    f.bandwidth.emplace_back(kernels[j], 1.0 / u);
  }
  f.residual = residual_of(samples, [&](const MemorySample& s) {
    return f.kernel_overhead + s.bytes / f.bandwidth_of(s.kernel);
  });
  return f;
}

double weighted_memory_efficiency(const MemoryFit& fit, const std::vector<std::pair<std::string, double>>& weights,
                                  double hbm_bw) {
  double bytes = 0, seconds = 0;
  for (const auto& [kernel, w] : weights) {
    bytes += w;
    seconds += w / fit.bandwidth_of(kernel);
  }
  if (!(seconds > 0)) throw std::invalid_argument("weighted memory efficiency: no weights");
  return bytes / seconds / hbm_bw;
}

AlphaBetaFit fit_alpha_beta(const std::vector<TransferSample>& samples) {
  require_timed(samples, 2, "latency-bandwidth fit");
  // (steps/t) alpha + (factor * bytes / t) beta = 1, beta = 1 / bandwidth.
  Eigen::MatrixXd A(static_cast<Eigen::Index>(samples.size()), 2);
  Eigen::VectorXd y = Eigen::VectorXd::Ones(A.rows());
  AlphaBetaFit f;
  f.min_bytes = samples.front().bytes;
  f.max_bytes = samples.front().bytes;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto& s = samples[i];
    A(static_cast<Eigen::Index>(i), 0) = s.latency_steps / s.seconds;
    A(static_cast<Eigen::Index>(i), 1) = s.byte_factor * s.bytes / s.seconds;
    f.min_bytes = std::min(f.min_bytes, s.bytes);
    f.max_bytes = std::max(f.max_bytes, s.bytes);
  }
  if (f.min_bytes == f.max_bytes)
    throw std::invalid_argument("latency-bandwidth fit: every sample has the same size (" + std::to_string(static_cast<long long>(f.max_bytes)) +
                                " bytes)");
  const Eigen::VectorXd x = solve_constrained(A, y, {true, true});
  if (!(x[1] > 0))
    throw std::invalid_argument("latency-bandwidth fit: the times do not grow with the size between " +
                                std::to_string(static_cast<long long>(f.min_bytes)) + " and " + std::to_string(static_cast<long long>(f.max_bytes)) + " bytes");
  f.latency = x[0];
  f.bandwidth = 1.0 / x[1];
  f.residual = residual_of(samples, [&](const TransferSample& s) {
    return s.latency_steps * f.latency + s.byte_factor * s.bytes / f.bandwidth;
  });
  return f;
}

AlphaBetaFit fit_latency_only(const std::vector<TransferSample>& samples) {
  require_timed(samples, 1, "latency fit");
  // (steps / t) alpha = 1 for every sample: alpha = sum(x) / sum(x^2), x = steps / t.
  double sx = 0, sxx = 0;
  AlphaBetaFit f;
  f.min_bytes = f.max_bytes = samples.front().bytes;
  for (const auto& s : samples) {
    const double x = s.latency_steps / s.seconds;
    sx += x;
    sxx += x * x;
    f.min_bytes = std::min(f.min_bytes, s.bytes);
    f.max_bytes = std::max(f.max_bytes, s.bytes);
  }
  f.latency = sx / sxx;
  f.residual = residual_of(samples, [&](const TransferSample& s) { return s.latency_steps * f.latency; });
  return f;
}

std::vector<TransferSample> in_size_range(const std::vector<TransferSample>& samples, double min_bytes,
                                          double max_bytes) {
  std::vector<TransferSample> out;
  for (const auto& s : samples)
    if (s.bytes >= min_bytes && s.bytes <= max_bytes) out.push_back(s);
  return out;
}

FlashFit fit_flash(const std::vector<FlashSample>& samples, double peak_flops, double kernel_overhead,
                   double head_dim_half) {
  require_timed(samples, 1, "FlashAttention fit");
  const auto work = [](const FlashSample& s) {
    return (1.0 + kFlashBackwardFactor) * kFlashCausalFlopFraction * 4.0 * s.batch_heads * s.seq * s.seq * s.head_dim;
  };
  double shortest = samples.front().seq, longest = shortest;
  for (const auto& s : samples) shortest = std::min(shortest, s.seq), longest = std::max(longest, s.seq);
  // For a given seq_half, fit_flash's one unknown u = 1 / max_efficiency with x scaled by
  // the curve's shape at the sample.
  const auto fit_at = [&](double seq_half) {
    FlashCurve c{1.0, seq_half, head_dim_half};
    double xy = 0, xx = 0;
    for (const auto& s : samples) {
      const double x = work(s) / (peak_flops * c.at(s.seq, s.head_dim) * s.seconds);
      xy += x * (1.0 - 2.0 * kernel_overhead / s.seconds);
      xx += x * x;
    }
    if (!(xy > 0)) throw std::invalid_argument("FlashAttention fit: the kernel overhead exceeds every measured time");
    c.max_efficiency = xx / xy;
    FlashFit f{c.max_efficiency, seq_half, head_dim_half, {}};
    f.residual = residual_of(samples, [&](const FlashSample& s) {
      return work(s) / (peak_flops * c.at(s.seq, s.head_dim)) + 2.0 * kernel_overhead;
    });
    return f;
  };
  FlashFit best = fit_at(0.0);
  if (longest > shortest)
    for (double seq_half = 1; seq_half <= 65536; seq_half += 1) {
      const FlashFit f = fit_at(seq_half);
      if (f.residual.rms_relative < best.residual.rms_relative - 1e-12) best = f;
    }
  return best;
}

AttentionKernel sdpa_kernel(int compute_major) {
  return compute_major >= 9 ? AttentionKernel::cudnn : AttentionKernel::flash2;
}

void apply_flash_fit(GpuProfile& g, AttentionKernel kernel, const FlashFit& fit) {
  // The kernel's curve moves from kernels: (a datasheet's cited one) to the flash_* keys.
  g.attention.kernels[static_cast<std::size_t>(kernel)] = {};
  g.attention.kernel = kernel;
  g.attention.flash_efficiency = fit.flash_efficiency;
  g.attention.flash_seq_half = fit.seq_half;
  g.attention.flash_head_dim_half = fit.head_dim_half;
}

std::vector<FlashSample> without_gradient_accumulation(std::vector<FlashSample> samples, double add_bandwidth) {
  if (!(add_bandwidth > 0)) throw std::invalid_argument("gradient accumulation: no measured add bandwidth");
  for (auto& s : samples) {
    const double bytes = 3.0 * 3.0 * s.batch_heads * s.seq * s.head_dim * 2.0;  // q, k, v: read 2, write 1
    s.seconds -= bytes / add_bandwidth;
    if (!(s.seconds > 0))
      throw std::invalid_argument("gradient accumulation: takes longer than the recorded call");
  }
  return samples;
}

ScoreBmmFit fit_score_bmm(const std::vector<BmmSample>& samples, double peak_flops, double kernel_overhead) {
  require_timed(samples, 1, "attention score fit");
  // t_pred = F / (peak * c * g(d)) + o; with u = 1/c the relative error row is
  //   (F / (peak g(d) t)) u = 1 - o/t: one unknown, u = sum(x y) / sum(x^2).
  double xy = 0, xx = 0;
  for (const auto& s : samples) {
    const double x = 2.0 * s.batch * s.m * s.n * s.k / (peak_flops * score_bmm_head_dim_scale(s.head_dim) * s.seconds);
    xy += x * (1.0 - kernel_overhead / s.seconds);
    xx += x * x;
  }
  if (!(xy > 0)) throw std::invalid_argument("attention score fit: the kernel overhead exceeds every measured time");
  ScoreBmmFit f;
  f.score_bmm_efficiency = xx / xy;
  f.residual = residual_of(samples, [&](const BmmSample& s) {
    return 2.0 * s.batch * s.m * s.n * s.k /
               (peak_flops * f.score_bmm_efficiency * score_bmm_head_dim_scale(s.head_dim)) +
           kernel_overhead;
  });
  return f;
}

std::string efficiency_fit_problem(const std::string& fit, const std::string& key, double efficiency,
                                   const Residual& residual, double max_rms_relative, double max_efficiency) {
  if (!std::isfinite(efficiency) || efficiency <= 0 || efficiency > max_efficiency)
    return fmt::format("{}: {} fitted at {:.3g}, outside (0, {:.3g}]", fit, key, efficiency, max_efficiency);
  if (!(residual.rms_relative <= max_rms_relative))
    return fmt::format("{}: rms error {:.0f}% over {} samples, above the {:.0f}% a profile may have", fit,
                       100 * residual.rms_relative, residual.samples, 100 * max_rms_relative);
  return "";
}

void apply_memory_measurements(GpuProfile& g, double intercept,
                               const std::vector<std::pair<std::string, double>>& bandwidth) {
  g.dispatch = intercept;
  for (const auto& [kernel, rate] : bandwidth) {
    const double efficiency = std::min(1.0, rate / g.hbm_bw);
    if (kernel == "layer_norm") g.norm_efficiency = efficiency;
    if (kernel == "copy") g.copy_efficiency = efficiency;
    if (kernel == "broadcast_mul") g.strided_efficiency = efficiency;
  }
}

}  // namespace partune::calibration
