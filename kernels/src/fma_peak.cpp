// The fp32 peak of a core: independent fused multiply-add chains, enough of them (16) to
// cover the FMA latency on every port, in the widest instruction set the CPU has. The
// project is compiled for generic x86-64, so each variant is compiled for its own target
// and picked at run time.
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "bench_internal.hpp"

namespace partune::kernels::detail {

namespace {

constexpr int kChains = 16;

// Each returns FLOPs done; the accumulators are summed into `sink` so nothing is elided.
__attribute__((target("avx512f"))) double fma_avx512(long iterations, float& sink) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(c));
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  // Lane by lane: GCC 12's _mm512_reduce_add_ps warns about its own uninitialised temporary.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, total);
  for (float lane : lanes) sink += lane;
  return 2.0 * 16.0 * kChains * static_cast<double>(iterations);
}

__attribute__((target("avx2,fma"))) double fma_avx2(long iterations, float& sink) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + 1e-3f * static_cast<float>(c));
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], mul, add);
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, total);
  for (float v : lanes) sink += v;
  return 2.0 * 8.0 * kChains * static_cast<double>(iterations);
}

double fma_scalar(long iterations, float& sink) {
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = 1.0f + 1e-3f * static_cast<float>(c);
  for (long i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
  for (int c = 0; c < kChains; ++c) sink += acc[c];
  return 2.0 * kChains * static_cast<double>(iterations);
}

}  // namespace

double fma_peak_flops(int threads, double target_seconds, std::string& isa) {
  double (*kernel)(long, float&) = fma_scalar;
  isa = "scalar";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    kernel = fma_avx512;
    isa = "avx512f";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    kernel = fma_avx2;
    isa = "avx2+fma";
  }
  // Size one run from a short probe, then take the best of three runs of all threads.
  float probe_sink = 0;
  auto t0 = std::chrono::steady_clock::now();
  const double probe_flops = kernel(200000, probe_sink);
  const double probe_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long iterations =
      std::max(1000L, static_cast<long>(200000.0 * (target_seconds / 3.0) / std::max(probe_s, 1e-6)));
  (void)probe_flops;
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<float> sinks(static_cast<std::size_t>(threads), 0.0f);
    std::vector<double> flops(static_cast<std::size_t>(threads), 0.0);
    std::vector<std::thread> pool;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { flops[static_cast<std::size_t>(t)] = kernel(iterations, sinks[static_cast<std::size_t>(t)]); });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double total = 0;
    for (double f : flops) total += f;
    best = std::max(best, total / s);
    volatile float keep = 0;
    for (float v : sinks) keep = keep + v;
  }
  return best;
}

}  // namespace partune::kernels::detail
