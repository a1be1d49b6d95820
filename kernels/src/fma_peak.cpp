// The fp32 peak of a core: independent fused multiply-add chains in the widest instruction
// set the CPU has, enough of them to cover the FMA latency on both ports (latency 4-5
// cycles x 2 ports: 8-10 in flight) and few enough to stay in registers: 12 of AVX2's 16
// ymm registers, 16 of AVX-512's 32 (16 chains on AVX2 spilled three accumulators to the
// stack, and the store-to-load latency on their chains read the peak ~1.6x low). The
// project is compiled for generic x86-64, so each variant is compiled for its own target
// and picked at run time. Each thread is timed on its own CPU clock: a process beside it
// taking turns on the core slows the wall clock, not the core.
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "bench_internal.hpp"

namespace partune::kernels::detail {

namespace {

// Each returns the FLOPs done; the accumulators are summed into `sink` so nothing is elided.
template <int kChains>
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

template <int kChains>
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

// SSE2 has no FMA: a multiply and an add per element, 12 chains in 16 xmm registers.
double fma_scalar(long iterations, float& sink) {
  constexpr int kChains = 12;
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = 1.0f + 1e-3f * static_cast<float>(c);
  for (long i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * 0.999999f + 1e-7f;
  for (int c = 0; c < kChains; ++c) sink += acc[c];
  return 2.0 * kChains * static_cast<double>(iterations);
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// FLOP/s of one run of `kernel` on this thread, by this thread's CPU clock.
double rate_of(double (*kernel)(long, float&), long iterations, float& sink) {
  const double t0 = thread_cpu_seconds();
  const double flops = kernel(iterations, sink);
  return flops / std::max(thread_cpu_seconds() - t0, 1e-9);
}

}  // namespace

double fma_peak_flops(int threads, double target_seconds, std::string& isa) {
  double (*kernel)(long, float&) = fma_scalar;
  isa = "sse2 (no FMA)";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    kernel = fma_avx512<16>;
    isa = "avx512f";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    kernel = fma_avx2<12>;
    isa = "avx2+fma";
  }
  // Size one run from a short probe, then take the best of three runs of all threads;
  // each thread's rate is its own FLOPs over its own CPU time, the total their sum.
  float probe_sink = 0;
  const double probe_iterations = 200000;
  const double probe_seconds = probe_iterations * kernel(1, probe_sink) / rate_of(kernel, 200000, probe_sink);
  const long iterations =
      std::max(1000L, static_cast<long>(probe_iterations * (target_seconds / 3.0) / std::max(probe_seconds, 1e-6)));
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<float> sinks(static_cast<std::size_t>(threads), 0.0f);
    std::vector<double> rates(static_cast<std::size_t>(threads), 0.0);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const auto i = static_cast<std::size_t>(t);
        rates[i] = rate_of(kernel, iterations, sinks[i]);
      });
    for (auto& th : pool) th.join();
    double total = 0;
    for (double r : rates) total += r;
    best = std::max(best, total);
    volatile float keep = 0;
    for (float v : sinks) keep = keep + v;
  }
  return best;
}

}  // namespace partune::kernels::detail
