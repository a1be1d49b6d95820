#pragma once
// The benchmarks behind calibrate() (calibrate.cpp runs them in order and fits them).
// Each takes one case, times it and returns the measurement; none prints.
#include <functional>
#include <string>

#include "partune/kernels/calibrate.hpp"

namespace partune::kernels::detail {

// Seconds per call of `f`: one warm-up call, then five batches of about target/5
// seconds each; the 20th percentile of the batch means (costmodel/quantile.hpp): the
// statistic validate and search --execute judge a measured step on, so a profile and
// the runs it is checked against describe the same undisturbed speed. Not the single
// fastest batch: that is one lucky moment. With `threads` 1 the calls are timed on this
// thread's CPU clock (a process taking turns on the core does not count), else on the
// wall clock.
double time_per_call(const std::function<void()>& f, double target_seconds, int threads);

// LibTorch fp32 CPU kernels (compute_bench.cpp). `threads`: LibTorch intra-op threads.
GemmMeasurement bench_gemm(const std::string& shape, double m, double n, double k, int threads, double target);
MemoryMeasurement bench_memory(const std::string& kernel, double elements, int threads, double target);
AttentionMeasurement bench_attention(const std::string& product, double heads, double seq, double head_dim,
                                     double target);
FlashMeasurement bench_flash(double heads, double seq, double head_dim, double target);

// `kernel` ("gemm" with m, n, k, or an element-wise kernel of bench_memory with `elements`
// in m) timed alone on this thread and on `threads` threads at once, alternately, `rounds`
// times (target seconds each timing); the means of each side.
AllBusyMeasurement bench_all_busy(const std::string& name, const std::string& kernel, double m, double n, double k,
                                  int threads, double target, int rounds);

// FLOP/s of `threads` threads each running independent FMA chains (fma_peak.cpp); `isa`
// gets the instruction set used.
double fma_peak_flops(int threads, double target_seconds, std::string& isa);

// Gloo over loopback between this process and a forked peer (gloo_bench.cpp): every size
// of `sizes` for all_reduce, all_gather and send_recv (ping-pong). Must run before this
// process starts any thread pool (the peer is forked). `tick` is called per size.
// `quick`: fewer repetitions per size.
std::vector<TransferMeasurement> bench_gloo(const std::vector<double>& sizes, bool quick,
                                            const std::function<void(const char*)>& tick);

// libfabric ping-pong between two endpoints of one provider, two threads (fabric_probe.cpp).
FabricProbe probe_libfabric(const std::vector<double>& sizes, double target_seconds);
// "1.17" from fi_version(), or why there is no libfabric in this build.
std::string libfabric_version();

}  // namespace partune::kernels::detail
