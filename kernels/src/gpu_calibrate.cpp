// calibrate_gpu(): the GPU's benchmarks through LibTorch (and partune's CUDA FlashAttention),
// timed with torch::cuda::synchronize() around batches of calls, then the fits
// (gpu_profile_file.cpp, which also writes the instance-type file). Compiles against a
// CPU-only LibTorch 1.13 (where cuda_unavailable_reason() refuses before anything runs) and
// against LibTorch 2.x with CUDA; what only 2.x has (FP8, scaled_dot_product_attention) is
// behind TORCH_VERSION checks, and its absence is a note in the profile.
#include "partune/kernels/gpu_calibrate.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "partune/costmodel/quantile.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/kernels/flash_attention.hpp"
#include "profile_text.hpp"

// at::_scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
// -> Tensor since LibTorch 2.5 (2.1-2.4 took the scales as later keywords and also returned
// amax); scaled_dot_product_attention(q, k, v, mask, dropout, is_causal) since 2.0.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define PARTUNE_HAVE_SCALED_MM 1
#endif
#if TORCH_VERSION_MAJOR >= 2
#define PARTUNE_HAVE_SDPA 1
#endif

namespace partune::kernels {

namespace {

constexpr double KiB = 1024.0, MiB = 1024.0 * KiB, GiB = 1024.0 * MiB;
constexpr int kBatches = 5;  // as the CPU path (compute_bench.cpp)

// The CUDA driver API, looked up at run time: its C ABI is stable across CUDA versions,
// and a CPU-only LibTorch build has no CUDA headers to compile against. Device 0 is the
// one LibTorch's default device is (both honour CUDA_VISIBLE_DEVICES).
GpuInfo driver_info() {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw std::runtime_error(std::string("cannot load the CUDA driver (libcuda.so.1): ") + ::dlerror());
  const auto symbol = [&](const char* name) {
    void* f = ::dlsym(lib, name);
    if (!f) throw std::runtime_error(std::string("the CUDA driver has no ") + name);
    return f;
  };
  const auto check = [](int result, const char* call) {
    if (result != 0) throw std::runtime_error(fmt::format("{} failed (CUresult {})", call, result));
  };
  // CUresult, CUdevice and CUdevice_attribute are ints; the attribute numbers are cuda.h's.
  enum : int { kClockRate = 13, kMultiprocessors = 16, kL2Bytes = 38, kMajor = 75, kMinor = 76 };
  const auto init = reinterpret_cast<int (*)(unsigned)>(symbol("cuInit"));
  const auto device_get = reinterpret_cast<int (*)(int*, int)>(symbol("cuDeviceGet"));
  const auto get_name = reinterpret_cast<int (*)(char*, int, int)>(symbol("cuDeviceGetName"));
  const auto attribute = reinterpret_cast<int (*)(int*, int, int)>(symbol("cuDeviceGetAttribute"));
  const auto total_mem = reinterpret_cast<int (*)(std::size_t*, int)>(symbol("cuDeviceTotalMem_v2"));
  const auto driver_version = reinterpret_cast<int (*)(int*)>(symbol("cuDriverGetVersion"));
  check(init(0), "cuInit");
  int dev = 0;
  check(device_get(&dev, 0), "cuDeviceGet");
  GpuInfo g;
  char name[256] = {};
  check(get_name(name, sizeof name - 1, dev), "cuDeviceGetName");
  g.name = name;
  int v = 0;
  check(attribute(&v, kMultiprocessors, dev), "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  g.sm_count = v;
  check(attribute(&v, kL2Bytes, dev), "cuDeviceGetAttribute(L2_CACHE_SIZE)");
  g.l2_bytes = v;
  check(attribute(&g.compute_major, kMajor, dev), "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  check(attribute(&g.compute_minor, kMinor, dev), "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  std::size_t bytes = 0;
  check(total_mem(&bytes, dev), "cuDeviceTotalMem");
  g.memory_bytes = static_cast<double>(bytes);
  check(driver_version(&g.driver_version), "cuDriverGetVersion");
  return g;
}

double meminfo_total_bytes() {
  std::ifstream in("/proc/meminfo");
  for (std::string key; in >> key;) {
    double kib = 0;
    in >> kib;
    if (key == "MemTotal:") return kib * KiB;
    in.ignore(1 << 10, '\n');
  }
  return 0;
}

torch::TensorOptions on_gpu(torch::ScalarType dtype) {
  return torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
}

// Seconds per call of `f` (GpuTiming): one call to warm up, one to size the batches, then
// five batches of about target/5 seconds each.
GpuTiming time_gpu(const std::function<void()>& f, double target_seconds) {
  using clock = std::chrono::steady_clock;
  // The GPU runs ahead of the host: only a synchronize() on both sides of a batch makes
  // its wall time the GPU's.
  const auto seconds_of = [&](long reps) {
    torch::cuda::synchronize();
    const auto t0 = clock::now();
    for (long i = 0; i < reps; ++i) f();
    torch::cuda::synchronize();
    return std::chrono::duration<double>(clock::now() - t0).count() / static_cast<double>(reps);
  };
  seconds_of(1);  // warm-up: allocations, cuBLAS heuristics and workspaces, module loading
  const double first = seconds_of(1);
  const long reps = std::clamp(static_cast<long>(target_seconds / kBatches / std::max(first, 1e-7)), 1L, 100000L);
  std::vector<double> batch(kBatches);
  for (double& b : batch) b = seconds_of(reps);
  return {quantile(batch, kLowQuantile), *std::min_element(batch.begin(), batch.end()),
          *std::max_element(batch.begin(), batch.end())};
}

void warm_up_clocks(double seconds) {
  // An idle GPU sits at its lowest clocks (an H200 here read 345 MHz idle, 1980 just after
  // matmuls: .library/device/KINDS.md): the first timings would see the ramp.
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({8192, 8192}, on_gpu(torch::kBFloat16));
  const auto t0 = std::chrono::steady_clock::now();
  do {
    for (int i = 0; i < 4; ++i) (void)torch::matmul(x, x);
    torch::cuda::synchronize();
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
}

GpuTiming time_bf16_gemm(double m, double n, double k, double target) {
  torch::NoGradGuard no_grad;  // a GEMM's time does not depend on autograd
  const auto x = torch::randn({static_cast<long>(m), static_cast<long>(k)}, on_gpu(torch::kBFloat16));
  const auto w = torch::randn({static_cast<long>(k), static_cast<long>(n)}, on_gpu(torch::kBFloat16));
  return time_gpu([&] { (void)torch::matmul(x, w); }, target);
}

GpuTiming time_fp8_gemm(double m, double n, double k, double target) {
#ifdef PARTUNE_HAVE_SCALED_MM
  torch::NoGradGuard no_grad;
  const auto bf16 = on_gpu(torch::kBFloat16);
  // Operands cast beforehand, as Transformer Engine keeps them: only the GEMM is timed.
  // cuBLASLt takes the second one column-major: an [n, k] row-major tensor, transposed.
  const auto a = torch::randn({static_cast<long>(m), static_cast<long>(k)}, bf16).to(at::ScalarType::Float8_e4m3fn);
  const auto b = torch::randn({static_cast<long>(n), static_cast<long>(k)}, bf16).to(at::ScalarType::Float8_e4m3fn).t();
  const auto scale = torch::ones({1}, on_gpu(torch::kFloat32));  // per-tensor scaling
  // use_fast_accum false: Transformer Engine accumulates in full precision in the two
  // backward GEMMs of each three (fast accumulation in the forward only).
  return time_gpu([&] { (void)at::_scaled_mm(a, b, scale, scale, {}, {}, at::ScalarType::BFloat16, false); }, target);
#else
  (void)m, (void)n, (void)k, (void)target;
  throw std::runtime_error(
      fmt::format("LibTorch {} has no at::_scaled_mm with per-tensor scales (2.5 or later)", TORCH_VERSION));
#endif
}

GpuMemoryMeasurement bench_gpu_memory(const std::string& kernel, double elements, double target) {
  const long n = static_cast<long>(elements);
  const long width = std::min<long>(n, 4096);  // LayerNorm's rows: a hidden size
  const auto opts = on_gpu(torch::kBFloat16);
  torch::Tensor a = torch::randn({n / width, width}, opts), b = torch::randn({n / width, width}, opts);
  GpuMemoryMeasurement r;
  r.kernel = kernel;
  r.elements = static_cast<double>(a.numel());
  std::function<void()> call;
  if (kernel == "copy") {
    call = [&] { b.copy_(a); };  // the bandwidth reference, read + write, no autograd
    r.bytes = 4.0 * r.elements;
  } else {
    // In training the forward records autograd nodes: the per-op floor includes them.
    a.requires_grad_(true);
    if (kernel == "add") {
      call = [&] { (void)(a + b); };
      r.bytes = 6.0 * r.elements;  // two reads, one write
    } else if (kernel == "gelu") {
      call = [&] { (void)torch::gelu(a); };
      r.bytes = 4.0 * r.elements;
    } else if (kernel == "broadcast_mul") {
      // A per-row factor broadcast over the row (RMSNorm's x * r, rotary's tables): LibTorch's
      // non-vectorised element-wise kernel.
      const auto factor = torch::rand({n / width, 1}, opts);
      call = [&, factor] { (void)(a * factor); };
      r.bytes = 4.0 * r.elements;
    } else if (kernel == "layer_norm") {
      const auto gamma = torch::ones({width}, opts.requires_grad(true));
      const auto beta = torch::zeros({width}, opts.requires_grad(true));
      call = [&, gamma, beta] { (void)torch::layer_norm(a, {width}, gamma, beta); };
      r.bytes = 4.0 * r.elements;
    } else {
      throw std::invalid_argument("unknown memory-bound kernel '" + kernel + "'");
    }
  }
  r.time = time_gpu(call, target);
  return r;
}

GpuTiming time_score_bmm(const std::string& product, double batch_heads, double seq, double head_dim, double target) {
  torch::NoGradGuard no_grad;
  const long bh = static_cast<long>(batch_heads), s = static_cast<long>(seq), d = static_cast<long>(head_dim);
  const auto opts = on_gpu(torch::kBFloat16);
  if (product == "qk") {
    const auto q = torch::randn({bh, s, d}, opts), k = torch::randn({bh, s, d}, opts);
    const auto kt = k.transpose(1, 2);  // the layer's K^T is a view, as here
    return time_gpu([&] { (void)torch::bmm(q, kt); }, target);
  }
  if (product == "av") {
    const auto a = torch::softmax(torch::randn({bh, s, s}, opts), -1), v = torch::randn({bh, s, d}, opts);
    return time_gpu([&] { (void)torch::bmm(a, v); }, target);
  }
  throw std::invalid_argument("unknown attention product '" + product + "'");
}

GpuTiming time_attention(const std::string& kernel, double batch_heads, double seq, double head_dim, double target) {
  const std::vector<std::int64_t> shape{1, static_cast<std::int64_t>(batch_heads), static_cast<std::int64_t>(seq),
                                        static_cast<std::int64_t>(head_dim)};
  const auto opts = on_gpu(torch::kBFloat16);
  const auto q = torch::randn(shape, opts).requires_grad_(), k = torch::randn(shape, opts).requires_grad_(),
             v = torch::randn(shape, opts).requires_grad_();
  const auto grad = torch::randn(shape, opts);
  // As in training: the forward recorded, then its backward (causal), the gradients
  // returned rather than accumulated into q, k and v's .grad (before 2026-11-29 each call
  // also ran three adds into them: calibration::without_gradient_accumulation).
  const auto fwd_bwd = [&](const torch::Tensor& out) { (void)torch::autograd::grad({out}, {q, k, v}, {grad}); };
  if (kernel == "flash") return time_gpu([&] { fwd_bwd(flash_attention(q, k, v, true)); }, target);
#ifdef PARTUNE_HAVE_SDPA
  if (kernel == "sdpa")
    return time_gpu([&] { fwd_bwd(at::scaled_dot_product_attention(q, k, v, {}, 0.0, true)); }, target);
#endif
  throw std::invalid_argument(
      fmt::format("attention kernel '{}' is not in this build (LibTorch {})", kernel, TORCH_VERSION));
}

GpuCopyMeasurement bench_host_copy(const std::string& direction, double bytes, double target) {
  const long n = static_cast<long>(bytes);
  // Pinned host memory: what an offload path uses (pageable memory is staged through it).
  auto host = torch::empty({n}, torch::TensorOptions().dtype(torch::kUInt8).pinned_memory(true));
  auto device = torch::empty({n}, on_gpu(torch::kUInt8));
  GpuCopyMeasurement r{direction, bytes, {}};
  if (direction == "host_to_device")
    r.time = time_gpu([&] { device.copy_(host, true); }, target);
  else if (direction == "device_to_host")
    r.time = time_gpu([&] { host.copy_(device, true); }, target);
  else
    throw std::invalid_argument("unknown copy direction '" + direction + "'");
  return r;
}

struct GemmCase {
  std::string shape;
  double m, n, k;
};
struct AttentionCase {
  double batch_heads, seq, head_dim;
};

// Every benchmark case, so that the progress bar knows the total before anything runs.
struct GpuBenchmarkPlan {
  double warm_up_seconds = 0, target = 0;  // target: seconds of timing per case
  std::vector<GemmCase> bf16, fp8;
  std::vector<std::string> memory_kernels{"copy", "add", "gelu", "layer_norm", "broadcast_mul"};
  std::vector<double> memory_sizes;
  std::vector<AttentionCase> score_bmm, flash;  // flash: partune's kernel, then LibTorch's SDPA
  double copy_bytes = 0;

  int total() const {
    return 1 +
           static_cast<int>(bf16.size() + fp8.size() + memory_kernels.size() * memory_sizes.size() +
                            2 * score_bmm.size() + 2 * flash.size()) +
           2;
  }
};

GpuBenchmarkPlan plan_gpu_benchmarks(bool q) {
  using ints = std::vector<int>;
  GpuBenchmarkPlan p;
  p.warm_up_seconds = q ? 0.5 : 1.0;
  p.target = q ? 0.05 : 0.2;
  // bf16: squares (tile and wave quantisation: 1024^2 is 64 tiles of 128^2 for 132 SMs), a
  // layer's GEMMs (tokens x out x in: hidden 2048-8192, LLaMA FFN 11008 and 14336), and a
  // full-wave output over short k (k_half). Every shape is compute-bound under the cost
  // model's roofline, which the fit leaves out; the shortest (1024^3) only inform the fit
  // when the kernel overhead is small (gpu_profile_file.cpp).
  for (int s : q ? ints{1024, 2048, 4096, 8192} : ints{1024, 2048, 3072, 4096, 6144, 8192})
    p.bf16.push_back({fmt::format("square {}", s), double(s), double(s), double(s)});
  const std::vector<std::pair<int, int>> nk =
      q ? std::vector<std::pair<int, int>>{{4096, 4096}, {11008, 4096}, {4096, 11008}, {14336, 4096}, {2048, 8192}}
        : std::vector<std::pair<int, int>>{{2048, 2048},  {4096, 4096},  {8192, 8192},  {2048, 8192}, {8192, 2048},
                                           {11008, 4096}, {4096, 11008}, {14336, 4096}, {4096, 14336}};
  for (int t : q ? ints{4096} : ints{4096, 8192, 16384})
    for (const auto& [n, k] : nk)
      p.bf16.push_back({fmt::format("tokens {} n {} k {}", t, n, k), double(t), double(n), double(k)});
  for (int k : {1024, 2048}) p.bf16.push_back({fmt::format("n 8192 k {}", k), 8192, 8192, double(k)});
  // Few output tiles over a long k: one or two waves, long enough to time (the tile edge).
  for (const auto& [mn, k] : q ? std::vector<std::pair<int, int>>{{1024, 16384}, {2048, 8192}}
                               : std::vector<std::pair<int, int>>{{1024, 16384}, {2048, 8192}, {3072, 8192}})
    p.bf16.push_back({fmt::format("few tiles {} k {}", mn, k), double(mn), double(mn), double(k)});
  for (int s : q ? ints{4096, 8192} : ints{2048, 4096, 8192, 16384})
    p.fp8.push_back({fmt::format("square {}", s), double(s), double(s), double(s)});
  for (const auto& [n, k] :
       q ? std::vector<std::pair<int, int>>{{4096, 4096}, {14336, 4096}}
         : std::vector<std::pair<int, int>>{{4096, 4096}, {11008, 4096}, {4096, 11008}, {14336, 4096}})
    p.fp8.push_back({fmt::format("tokens 8192 n {} k {}", n, k), 8192, double(n), double(k)});
  // 64 elements: the per-kernel floor (back-to-back launches); then bf16 tensors of 256 MiB
  // and more, far past the 50-60 MB of L2.
  p.memory_sizes = q ? std::vector<double>{64, 134217728, 536870912}
                     : std::vector<double>{64, 134217728, 268435456, 536870912, 1073741824};
  // (batch x heads, seq, head_dim): FlashAttention's benchmark convention of 16k tokens a
  // batch at head_dim 128 (microbench.md §2), halved in --quick.
  p.score_bmm = q ? std::vector<AttentionCase>{{32, 2048, 128}, {64, 2048, 64}}
                  : std::vector<AttentionCase>{{128, 2048, 128}, {64, 4096, 128}, {128, 2048, 64}, {64, 4096, 64}};
  p.flash = q ? std::vector<AttentionCase>{{32, 2048, 128}, {16, 4096, 128}}
              : std::vector<AttentionCase>{{32, 2048, 128}, {64, 2048, 128}, {16, 4096, 128}, {32, 4096, 128}};
  p.copy_bytes = q ? 256 * MiB : 1 * GiB;
  return p;
}

// The first line of an exception's message (LibTorch's carry a backtrace after it).
std::string first_line(const char* what) {
  const std::string s(what);
  return s.substr(0, s.find('\n'));
}

// The optional parts (FP8, the attention kernels): a failure is a note, the cases after it
// are skipped, and the datasheet value stays unless some ran.
void run_optional(GpuCalibration& c, const std::string& what, int cases, const std::function<void(int)>& one) {
  for (int i = 0; i < cases; ++i) {
    try {
      one(i);
    } catch (const std::exception& e) {
      c.notes.push_back(fmt::format("{} not measured: {}", what, first_line(e.what())));
      return;
    }
  }
}

void run_gpu_benchmarks(GpuCalibration& c, const GpuCalibrationOptions& options) {
  const GpuBenchmarkPlan p = plan_gpu_benchmarks(options.quick);
  const int total = p.total();
  int done = 0;
  const auto tick = [&](const char* what) {
    if (options.progress) options.progress(done, total, what);
    ++done;
  };
  // The parts every profile needs: a failure stops the calibration, naming the case.
  const auto required = [](const std::string& what, const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      throw std::runtime_error(fmt::format("{}: {}", what, first_line(e.what())));
    }
  };
  tick("warm-up");
  required("warm-up", [&] { warm_up_clocks(p.warm_up_seconds); });
  for (const auto& g : p.bf16) {
    tick("bf16 matmul");
    required("bf16 matmul " + g.shape, [&] {
      c.gemm.push_back({"bf16", g.shape, g.m, g.n, g.k, time_bf16_gemm(g.m, g.n, g.k, p.target)});
    });
  }
  if (c.gpu.compute_major * 10 + c.gpu.compute_minor < 89) {
    c.notes.push_back(
        fmt::format("FP8 GEMM not measured: compute capability {}.{} has no FP8 tensor cores (8.9 or later)",
                    c.gpu.compute_major, c.gpu.compute_minor));
    done += static_cast<int>(p.fp8.size());
  } else {
    run_optional(c, "FP8 GEMM", static_cast<int>(p.fp8.size()), [&](int i) {
      tick("fp8 matmul");
      const GemmCase& g = p.fp8[static_cast<std::size_t>(i)];
      c.gemm.push_back({"fp8_e4m3", g.shape, g.m, g.n, g.k, time_fp8_gemm(g.m, g.n, g.k, p.target)});
    });
  }
  for (const auto& k : p.memory_kernels)
    for (double n : p.memory_sizes) {
      tick("element-wise kernels");
      required(fmt::format("{} of {:.0f} elements", k, n),
               [&] { c.memory.push_back(bench_gpu_memory(k, n, p.target)); });
    }
  for (const auto& a : p.score_bmm)
    for (const char* product : {"qk", "av"}) {
      tick("attention bmm");
      required(fmt::format("attention {} bmm", product), [&] {
        c.attention.push_back({product, a.batch_heads, a.seq, a.head_dim,
                               time_score_bmm(product, a.batch_heads, a.seq, a.head_dim, p.target)});
      });
    }
  for (const char* direction : {"host_to_device", "device_to_host"}) {
    tick("pinned host copies");
    required(direction, [&] { c.copies.push_back(bench_host_copy(direction, p.copy_bytes, p.target)); });
  }
  // partune's own kernel last: an error inside it can leave the CUDA context unusable.
  for (const char* kernel : {"sdpa", "flash"}) {
    if (std::string(kernel) == "flash" && !c.gpu.partune_cuda_attention) {
      c.notes.push_back("partune's CUDA FlashAttention not measured: this build has no CUDA kernels (nvcc not found)");
      done += static_cast<int>(p.flash.size());
      continue;
    }
    run_optional(
        c, std::string(kernel) == "flash" ? "partune's CUDA FlashAttention" : "LibTorch's scaled_dot_product_attention",
        static_cast<int>(p.flash.size()), [&](int i) {
          tick("flash attention");
          const AttentionCase& a = p.flash[static_cast<std::size_t>(i)];
          c.attention.push_back({kernel, a.batch_heads, a.seq, a.head_dim,
                                 time_attention(kernel, a.batch_heads, a.seq, a.head_dim, p.target)});
        });
  }
}

}  // namespace

std::string cuda_unavailable_reason() {
  if (torch::cuda::is_available()) return "";
  return fmt::format("calibrate --device cuda: no CUDA device is visible (LibTorch {} built without CUDA, or no GPU)",
                     TORCH_VERSION);
}

GpuInfo gpu_info() {
  GpuInfo g = driver_info();
  g.date = detail::utc_now();
  g.host = detail::host_name();
  g.libtorch = TORCH_VERSION;
  g.partune_cuda_attention = flash_attention_has_cuda();
  g.attention_kernel = fused_attention_kernel(torch::Device(torch::kCUDA, 0));
  cpu_set_t set;
  g.host_cores =
      sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  g.host_memory_bytes = meminfo_total_bytes();
  return g;
}

GpuCalibration calibrate_gpu(const GpuCalibrationOptions& options, const GpuInfo& gpu, const std::string& base_name) {
  const auto start = std::chrono::steady_clock::now();
  GpuCalibration c;
  c.gpu = gpu;
  c.base_name = base_name;
  c.base = load_instance_type(base_name);
  c.quick = options.quick;
  run_gpu_benchmarks(c, options);
  if (options.progress) options.progress(1, 1, "fitting");
  fit_gpu_calibration(c);
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c;
}

}  // namespace partune::kernels
