// LibTorch fp32 CPU micro-benchmarks: the calls the backend's layers make (torch::matmul,
// element-wise and reduction kernels, the attention bmm's), with autograd recording the
// forward as it does in training.
#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "bench_internal.hpp"
#include "partune/kernels/flash_attention.hpp"
#include "partune/costmodel/quantile.hpp"

namespace partune::kernels::detail {

// Batches of a timing: their 20th percentile is the call's time (quantile.hpp).
constexpr int kBatches = 5;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double time_per_call(const std::function<void()>& f, double target_seconds, int threads) {
  // One thread: its work runs on this thread (LibTorch and OpenBLAS run inline with one
  // thread), so this thread's CPU clock times it without the turns other processes take.
  const auto now = [threads] {
    return threads == 1 ? thread_cpu_seconds()
                        : std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  auto seconds_of = [&](long reps) {
    const double t0 = now();
    for (long i = 0; i < reps; ++i) f();
    return (now() - t0) / static_cast<double>(reps);
  };
  const double first = seconds_of(1);  // warm-up: page faults, thread-pool start, caches
  const long reps = std::clamp(static_cast<long>(target_seconds / kBatches / std::max(first, 1e-9)), 1L, 100000L);
  // A call longer than the whole budget is timed twice (once more after the warm-up).
  if (first > target_seconds) return seconds_of(reps);
  std::vector<double> batch(kBatches);
  for (double& b : batch) b = seconds_of(reps);
  return quantile(batch, kLowQuantile);
}

namespace {

// A kernel call on tensors of its own (each thread gets its copy).
std::function<void()> make_kernel(const std::string& kernel, double m, double n, double k) {
  if (kernel == "gemm") {
    const auto x = torch::randn({static_cast<long>(m), static_cast<long>(k)});
    const auto w = torch::randn({static_cast<long>(k), static_cast<long>(n)});
    return [x, w] { (void)torch::matmul(x, w); };
  }
  const long elements = static_cast<long>(m);
  const long width = kernel == "softmax" ? 1024 : 768;
  const auto a = torch::randn({elements / width, width}), b = torch::randn({elements / width, width});
  if (kernel == "add") return [a, b] { (void)(a + b); };
  if (kernel == "gelu") return [a] { (void)torch::gelu(a); };
  if (kernel == "softmax") return [a] { (void)torch::softmax(a, -1); };
  if (kernel == "layer_norm") {
    const auto gamma = torch::ones({width}), beta = torch::zeros({width});
    return [a, gamma, beta, width] { (void)torch::layer_norm(a, {width}, gamma, beta); };
  }
  throw std::invalid_argument("unknown kernel '" + kernel + "'");
}

// Calls per second of `f` over `seconds` of wall time, started once `go` is set.
double calls_per_second(const std::function<void()>& f, double seconds, const std::atomic<bool>& go) {
  using clock = std::chrono::steady_clock;
  torch::NoGradGuard no_grad;  // thread-local: every timing thread sets it
  // Thread-local too, for OpenMP: a new thread's BLAS calls would otherwise start a team
  // of every core, and two such teams on the same cores spin against each other.
  at::set_num_threads(1);
  while (!go.load()) std::this_thread::yield();
  const auto t0 = clock::now();
  long calls = 0;
  double elapsed = 0;
  do {
    f();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  } while (elapsed < seconds);
  return static_cast<double>(calls) / elapsed;
}

}  // namespace

AllBusyMeasurement bench_all_busy(const std::string& name, const std::string& kernel, double m, double n, double k,
                                  int threads, double target, int rounds) {
  at::set_num_threads(1);  // each thread's calls run on that thread
  std::vector<std::function<void()>> calls;
  for (int t = 0; t < threads; ++t) calls.push_back(make_kernel(kernel, m, n, k));
  const std::atomic<bool> ready{true};
  calls[0]();  // warm-up: pages, caches
  auto alone = [&] { return 1.0 / calls_per_second(calls[0], target, ready); };
  auto all_busy = [&] {
    std::atomic<bool> go{false};
    std::vector<double> rates(static_cast<std::size_t>(threads));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] { rates[static_cast<std::size_t>(t)] = calls_per_second(calls[t], target, go); });
    go = true;
    for (std::thread& t : pool) t.join();
    double busy = 0;
    for (double rate : rates) busy += 1.0 / rate;
    return busy / threads;
  };
  AllBusyMeasurement r;
  r.kernel = name;
  r.threads = threads;
  // Alone and busy alternate, `rounds` times, ending alone: the cores' speed wanders over
  // seconds, and both sides must see the same stretch of it.
  double alone_sum = alone(), busy_sum = 0;
  for (int i = 0; i < rounds; ++i) {
    busy_sum += all_busy();
    alone_sum += alone();
  }
  r.busy_seconds = busy_sum / rounds;
  r.alone_seconds = alone_sum / (rounds + 1);
  return r;
}

GemmMeasurement bench_gemm(const std::string& shape, double m, double n, double k, int threads, double target) {
  at::set_num_threads(threads);
  torch::NoGradGuard no_grad;  // a GEMM's time does not depend on autograd; its overhead is fitted separately
  const auto x = torch::randn({static_cast<long>(m), static_cast<long>(k)});
  const auto w = torch::randn({static_cast<long>(k), static_cast<long>(n)});
  GemmMeasurement g;
  g.threads = threads;
  g.shape = shape;
  g.m = m;
  g.n = n;
  g.k = k;
  g.seconds = time_per_call([&] { (void)torch::matmul(x, w); }, target, threads);
  return g;
}

MemoryMeasurement bench_memory(const std::string& kernel, double elements, int threads, double target) {
  at::set_num_threads(threads);
  const long n = static_cast<long>(elements);
  // Rows as the layer shapes them: LayerNorm over the hidden size, softmax over a score row.
  const long width = std::min<long>(n, kernel == "softmax" ? 1024 : 768);
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  MemoryMeasurement r;
  r.kernel = kernel;
  r.threads = threads;
  r.elements = static_cast<double>(n);
  std::function<void()> call;
  torch::Tensor a = torch::randn({n / width, width}, opts), b = torch::randn({n / width, width}, opts);
  r.elements = static_cast<double>(a.numel());
  if (kernel == "copy") {
    // A plain copy (read + write) is the bandwidth reference; no autograd.
    call = [&] { b.copy_(a); };
    r.bytes = 8.0 * r.elements;
  } else {
    // In training the forward records autograd nodes: the per-op cost includes them.
    a.requires_grad_(true);
    if (kernel == "add") {
      call = [&] { (void)(a + b); };
      r.bytes = 12.0 * r.elements;  // two reads, one write
    } else if (kernel == "gelu") {
      call = [&] { (void)torch::gelu(a); };
      r.bytes = 8.0 * r.elements;
    } else if (kernel == "layer_norm") {
      const auto gamma = torch::ones({width}, opts.requires_grad(true));
      const auto beta = torch::zeros({width}, opts.requires_grad(true));
      call = [&, gamma, beta] { (void)torch::layer_norm(a, {width}, gamma, beta); };
      r.bytes = 8.0 * r.elements;
    } else if (kernel == "softmax") {
      call = [&] { (void)torch::softmax(a, -1); };
      r.bytes = 8.0 * r.elements;
    } else {
      throw std::invalid_argument("unknown memory-bound kernel '" + kernel + "'");
    }
  }
  r.seconds = time_per_call(call, target, threads);
  return r;
}

AttentionMeasurement bench_attention(const std::string& product, double heads, double seq, double head_dim,
                                     double target) {
  at::set_num_threads(1);
  torch::NoGradGuard no_grad;
  const long h = static_cast<long>(heads), s = static_cast<long>(seq), d = static_cast<long>(head_dim);
  AttentionMeasurement r;
  r.product = product;
  r.heads = heads;
  r.seq = seq;
  r.head_dim = head_dim;
  if (product == "qk") {
    const auto q = torch::randn({h, s, d}), k = torch::randn({h, s, d});
    const auto kt = k.transpose(1, 2);  // the layer's K^T is a view, as here
    r.seconds = time_per_call([&] { (void)torch::bmm(q, kt); }, target, 1);
  } else if (product == "av") {
    const auto a = torch::softmax(torch::randn({h, s, s}), -1), v = torch::randn({h, s, d});
    r.seconds = time_per_call([&] { (void)torch::bmm(a, v); }, target, 1);
  } else {
    throw std::invalid_argument("unknown attention product '" + product + "'");
  }
  return r;
}

FlashMeasurement bench_flash(double heads, double seq, double head_dim, double target) {
  at::set_num_threads(1);
  const std::vector<std::int64_t> shape{1, static_cast<std::int64_t>(heads), static_cast<std::int64_t>(seq),
                                        static_cast<std::int64_t>(head_dim)};
  const auto q = torch::randn(shape).requires_grad_(), k = torch::randn(shape).requires_grad_(),
             v = torch::randn(shape).requires_grad_();
  const auto grad = torch::randn(shape);
  FlashMeasurement r{heads, seq, head_dim, 0};
  // As in training: the forward recorded, then its backward.
  r.seconds = time_per_call([&] { flash_attention(q, k, v, true).backward(grad); }, target, 1);
  return r;
}

}  // namespace partune::kernels::detail
