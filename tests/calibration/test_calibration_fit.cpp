// The least-squares fits behind `partune calibrate`, on synthetic measurements generated
// from the cost model's own formulas with known parameters: every fit must give them back
// (exactly on clean data, within a few percent under multiplicative noise), and the
// guards must refuse data that cannot determine them.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "partune/costmodel/calibration_fit.hpp"
#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/op_cost.hpp"

using namespace partune;
using namespace partune::calibration;

namespace {

// Multiplicative noise of +-`amplitude` (uniform), fixed seed: deterministic.
struct Noise {
  std::mt19937 rng{42};
  double amplitude;
  double operator()() { return 1.0 + std::uniform_real_distribution<double>(-amplitude, amplitude)(rng); }
};

GpuProfile cpu_core(double max_eff, double k_half, double overhead) {
  GpuProfile g;
  g.peak_flops_fp32 = 172e9;
  g.hbm_bw = 1e15;  // no memory roofline: the fit models the compute part
  g.hbm_efficiency = 1;
  g.kernel_overhead = overhead;
  g.gemm.max_efficiency = max_eff;
  g.gemm.k_half = k_half;
  g.gemm.tile = 1;
  g.gemm.sm_count = 1;
  return g;
}

std::vector<GemmSample> gemm_samples(const GpuProfile& g, Noise* noise) {
  std::vector<GemmSample> s;
  for (double h : {256.0, 768.0, 1024.0})
    for (double t : {512.0, 1024.0}) {
      for (auto [m, n, k] : {std::array<double, 3>{t, 3 * h, h}, {t, h, h}, {t, 4 * h, h}, {t, h, 4 * h}})
        s.push_back({m, n, k, gemm_time(g, Precision::fp32, m, n, k) * (noise ? (*noise)() : 1.0)});
    }
  for (double e : {16.0, 32.0, 64.0, 128.0, 512.0})
    s.push_back({e, e, e, gemm_time(g, Precision::fp32, e, e, e) * (noise ? (*noise)() : 1.0)});
  return s;
}

}  // namespace

TEST_CASE("GEMM fit recovers max_efficiency and k_half from gemm_time", "[calibration]") {
  const GpuProfile g = cpu_core(0.19, 24, 3e-6);
  const GemmFit f = fit_gemm(gemm_samples(g, nullptr), g.peak_flops_fp32, g.kernel_overhead);
  CHECK(f.max_efficiency == Approx(0.19).epsilon(1e-9));
  CHECK(f.k_half == Approx(24).epsilon(1e-9));
  CHECK(f.residual.rms_relative < 1e-9);
  CHECK(f.residual.samples == 29);

  Noise noise{{}, 0.02};
  const GemmFit noisy = fit_gemm(gemm_samples(g, &noise), g.peak_flops_fp32, g.kernel_overhead);
  CHECK(noisy.max_efficiency == Approx(0.19).epsilon(0.02));
  CHECK(noisy.k_half == Approx(24).epsilon(0.15));
  CHECK(noisy.residual.rms_relative < 0.02);
}

TEST_CASE("GEMM fit keeps k_half non-negative", "[calibration]") {
  // Small shapes faster than large ones: the free fit wants k_half < 0; it is pinned at 0.
  std::vector<GemmSample> s{{64, 64, 64, 2.0 * 64 * 64 * 64 / 50e9}, {1024, 1024, 1024, 2.0 * 1024 * 1024 * 1024 / 40e9}};
  const GemmFit f = fit_gemm(s, 100e9, 0);
  CHECK(f.k_half == 0);
  CHECK(f.max_efficiency > 0.4);
  CHECK(f.max_efficiency < 0.5);
}

TEST_CASE("memory fit recovers the shared overhead and each kernel's bandwidth", "[calibration]") {
  const double overhead = 1.5e-6;
  const std::vector<std::pair<std::string, double>> bw{{"copy", 26e9}, {"add", 14e9}, {"gelu", 3.3e9}};
  std::vector<MemorySample> s;
  for (const auto& [k, b] : bw)
    for (double bytes : {512.0, 16e6, 64e6, 256e6}) s.push_back({k, bytes, overhead + bytes / b});
  const MemoryFit f = fit_memory(s);
  CHECK(f.kernel_overhead == Approx(overhead).epsilon(1e-9));
  for (const auto& [k, b] : bw) CHECK(f.bandwidth_of(k) == Approx(b).epsilon(1e-9));
  CHECK(f.residual.rms_relative < 1e-9);
  CHECK_THROWS_AS(f.bandwidth_of("softmax"), std::out_of_range);

  // hbm_efficiency: time-weighted over the bytes each kernel moves.
  const double eff = weighted_memory_efficiency(f, {{"add", 14}, {"gelu", 16}}, 26e9);
  CHECK(eff == Approx(30.0 / (14.0 / 14e9 + 16.0 / 3.3e9) / 26e9).epsilon(1e-9));
}

TEST_CASE("alpha-beta fit recovers latency and bandwidth under the collectives' formulas", "[calibration]") {
  const double alpha = 25e-6, bw = 3.5e9;
  std::vector<TransferSample> s;
  // Two-rank ring all-reduce (2 steps, factor 1), all-gather (1, 1/2), send/recv (1, 1).
  for (double bytes = 8; bytes <= 128.0 * (1 << 20); bytes *= 4)
    for (auto [steps, factor] : {std::pair{2.0, 1.0}, {1.0, 0.5}, {1.0, 1.0}})
      s.push_back({bytes, steps * alpha + factor * bytes / bw, steps, factor});
  const AlphaBetaFit f = fit_alpha_beta(s);
  CHECK(f.latency == Approx(alpha).epsilon(1e-9));
  CHECK(f.bandwidth == Approx(bw).epsilon(1e-9));
  CHECK(f.min_bytes == 8);
  CHECK(f.max_bytes == 128.0 * (1 << 20));
  CHECK(f.residual.rms_relative < 1e-9);

  Noise noise{{}, 0.05};
  for (auto& x : s) x.seconds *= noise();
  const AlphaBetaFit n = fit_alpha_beta(s);
  CHECK(n.latency == Approx(alpha).epsilon(0.05));
  CHECK(n.bandwidth == Approx(bw).epsilon(0.05));

  // Ranges: only the large messages determine the bandwidth well.
  const auto large = in_size_range(s, 1 << 20, 1e300);
  CHECK(large.size() == 3 * 4);  // 2, 8, 32 and 128 MiB
  CHECK(fit_alpha_beta(large).bandwidth == Approx(bw).epsilon(0.05));
}

TEST_CASE("alpha-beta fit refuses data without a bandwidth", "[calibration]") {
  CHECK_THROWS_AS(fit_alpha_beta({{8, 1e-5}}), std::invalid_argument);
  CHECK_THROWS_AS(fit_alpha_beta({{4096, 1e-5}, {4096, 2e-5}}), std::invalid_argument);
  // Bigger messages faster than small ones: no positive bandwidth.
  CHECK_THROWS_AS(fit_alpha_beta({{8, 1e-3}, {65536, 1e-5}}), std::invalid_argument);
  CHECK_THROWS_AS(fit_alpha_beta({{8, 0.0}, {64, 1e-5}}), std::invalid_argument);
}

TEST_CASE("a range whose times do not grow with the size keeps its latency", "[calibration]") {
  // Gloo's small all-gathers on the local VM: 0.7-1.0 ms whatever the size (8 B .. 32 KiB).
  // The least-squares relative-error latency of t = alpha is sum(1/t) / sum(1/t^2).
  const std::vector<TransferSample> flat{{8, 1.0e-3}, {512, 0.8e-3}, {32768, 0.8e-3}};
  CHECK_THROWS_AS(fit_alpha_beta(flat), std::invalid_argument);
  const AlphaBetaFit f = fit_latency_only(flat);
  const double sx = 1 / 1.0e-3 + 2 / 0.8e-3, sxx = 1 / 1.0e-6 + 2 / 0.64e-6;
  CHECK(f.latency == Approx(sx / sxx).epsilon(1e-12));
  CHECK(f.latency > 0.8e-3);
  CHECK(f.latency < 1.0e-3);
  CHECK(f.bandwidth == 0);  // not a term of this fit
  CHECK(f.min_bytes == 8);
  CHECK(f.max_bytes == 32768);
  // Two latency steps (a two-rank all-reduce): half the time a step.
  CHECK(fit_latency_only({{8, 1e-3, 2, 1}}).latency == Approx(0.5e-3));
  CHECK_THROWS_AS(fit_latency_only({}), std::invalid_argument);
}

TEST_CASE("score bmm fit inverts the estimator's head-dim scaling", "[calibration]") {
  const double peak = 172e9, key = 0.18, overhead = 2e-6;
  std::vector<BmmSample> s;
  for (auto [heads, seq, d] : {std::array<double, 3>{12, 1024, 64}, {16, 512, 32}, {8, 512, 128}}) {
    const double rate = peak * key * score_bmm_head_dim_scale(d);
    const double flops = 2 * heads * seq * seq * d;
    s.push_back({heads, seq, seq, d, d, flops / rate + overhead});  // Q K^T
    s.push_back({heads, seq, d, seq, d, flops / rate + overhead});  // A V
  }
  const ScoreBmmFit f = fit_score_bmm(s, peak, overhead);
  CHECK(f.score_bmm_efficiency == Approx(key).epsilon(1e-9));
  CHECK(f.residual.rms_relative < 1e-9);
  // At head_dim 128 the key is the rate itself; at 64 the estimator uses 0.75 of it.
  CHECK(score_bmm_head_dim_scale(128) == Approx(1.0));
  CHECK(score_bmm_head_dim_scale(64) == Approx(0.75));
}

// The failed calibration of issue 12: the FMA probe measured a peak 10x too low, so the
// GEMM fit needs an efficiency of 7.66 to explain the timings. Clamping it to 1 would
// write a profile nobody measured; the check names the fit, the key and the value.
TEST_CASE("a GEMM fit past efficiency 1 is refused, naming the fit", "[calibration]") {
  const GpuProfile g = cpu_core(0.766, 24, 3e-6);
  const GemmFit f = fit_gemm(gemm_samples(g, nullptr), g.peak_flops_fp32 / 10, g.kernel_overhead);
  REQUIRE(f.max_efficiency == Approx(7.66).epsilon(1e-6));
  CHECK(efficiency_fit_problem("gemm_1_thread", "max_efficiency", f.max_efficiency, f.residual, 0.5) ==
        "gemm_1_thread: max_efficiency fitted at 7.66, outside (0, 1]");
  // The same timings against the right peak make a usable fit.
  const GemmFit good = fit_gemm(gemm_samples(g, nullptr), g.peak_flops_fp32, g.kernel_overhead);
  CHECK(efficiency_fit_problem("gemm_1_thread", "max_efficiency", good.max_efficiency, good.residual, 0.5).empty());
}

TEST_CASE("a fit that explains its samples badly is refused, naming its rms error", "[calibration]") {
  // Every other sample 10x slower than the model: no (efficiency, k_half) explains both
  // halves. With one scale c for all, the relative least squares gives c = 1.1/1.01:
  // errors +9% and -89%, rms 63%.
  const GpuProfile g = cpu_core(0.19, 24, 3e-6);
  std::vector<GemmSample> s = gemm_samples(g, nullptr);
  for (std::size_t i = 0; i < s.size(); i += 2) s[i].seconds *= 10;
  const GemmFit f = fit_gemm(s, g.peak_flops_fp32, g.kernel_overhead);
  REQUIRE(f.residual.rms_relative > 0.5);
  const std::string problem = efficiency_fit_problem("gemm_1_thread", "max_efficiency", f.max_efficiency, f.residual, 0.5);
  CHECK(problem.rfind("gemm_1_thread: rms error ", 0) == 0);
  CHECK(problem.find("over 29 samples, above the 50% a profile may have") != std::string::npos);
  // Efficiencies at or below zero and NaN are outside the bounds too.
  CHECK(efficiency_fit_problem("attention", "score_bmm_efficiency", 0, {}, 0.5) ==
        "attention: score_bmm_efficiency fitted at 0, outside (0, 1]");
  CHECK(efficiency_fit_problem("attention", "score_bmm_efficiency", NAN, {}, 0.5) ==
        "attention: score_bmm_efficiency fitted at nan, outside (0, 1]");
}

// FlashAttention timings made by hand from the cost model's rule (op_cost.cpp: forward
// 0.5 F / rate + o, backward 2.5 times its FLOPs + o, F = 4 heads s^2 d) at efficiency
// 0.4: the fit recovers 0.4 exactly; the same timings 10% slower give 0.4 / 1.1.
TEST_CASE("the FlashAttention fit recovers the efficiency the timings were made with", "[calibration]") {
  const double peak = 100e9, overhead = 5e-6;
  std::vector<FlashSample> s;
  for (double seq : {128.0, 512.0, 2048.0})
    for (double d : {32.0, 64.0}) {
      const double F = 4.0 * 4 * seq * seq * d;
      const double fwd = 0.5 * F / (peak * 0.4) + overhead, bwd = 2.5 * 0.5 * F / (peak * 0.4) + overhead;
      s.push_back({4, seq, d, fwd + bwd});
    }
  const FlashFit f = fit_flash(s, peak, overhead);
  CHECK(f.flash_efficiency == Approx(0.4).epsilon(1e-9));
  CHECK(f.residual.rms_relative < 1e-9);
  for (auto& x : s) x.seconds = 1.1 * (x.seconds - 2 * overhead) + 2 * overhead;
  CHECK(fit_flash(s, peak, overhead).flash_efficiency == Approx(0.4 / 1.1).epsilon(1e-9));
}
