// calibrate(): runs the benchmarks in an order that keeps the Gloo peer's fork safe (before
// any thread pool exists) and fits the cost model's parameters. The instance-type file is
// profile_file.cpp.
#include "partune/kernels/calibrate.hpp"

#include <dlfcn.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "bench_internal.hpp"
#include "profile_text.hpp"

namespace partune::kernels {

namespace {

constexpr double KiB = 1024.0, MiB = 1024.0 * 1024.0, GiB = 1024.0 * MiB;
constexpr double kMemoryFitMinBytes = 16 * MiB;

int usable_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

std::string proc_field(const char* file, const char* key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

std::string command_output(const char* command) {
  std::string out;
  if (FILE* p = ::popen(command, "r")) {
    char buf[256];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

MachineInfo machine_info() {
  MachineInfo m;
  m.date = detail::utc_now();
  m.host = detail::host_name();
  m.cpu_model = proc_field("/proc/cpuinfo", "model name");
  if (m.cpu_model.empty()) m.cpu_model = "unknown (no model name in /proc/cpuinfo)";
  m.cores = usable_cores();
  m.memory_bytes = std::atof(proc_field("/proc/meminfo", "MemTotal").c_str()) * KiB;
  m.libtorch = TORCH_VERSION;
  // Gloo has no version macro and the LibTorch build does not report it: the package says.
  const std::string gloo = command_output("dpkg-query -W -f='${Version}' libgloo0 2>/dev/null");
  m.gloo = gloo.empty() ? "unknown (Gloo has no version macro, and libgloo0 is not a Debian package here)"
                        : "libgloo0 " + gloo + " (Debian package)";
  m.libfabric = detail::libfabric_version();
  // LibTorch's fp32 GEMMs run on OpenBLAS on Debian; its kernel choice decides the rate.
  using corename_fn = char* (*)();
  if (auto f = reinterpret_cast<corename_fn>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"))) m.blas_core = f();
  return m;
}

std::vector<double> geometric(double first, double last, double factor) {
  std::vector<double> v;
  for (double x = first; x <= last * 1.0001; x *= factor) v.push_back(x);
  return v;
}

void fit_transfers(Calibration& c) {
  struct Shape {
    const char* kind;
    double steps, factor;  // the estimator's two-rank ring formula (collective.cpp)
  };
  const Shape shapes[] = {{"all_reduce", 2, 1.0}, {"all_gather", 1, 0.5}, {"send_recv", 1, 1.0}};
  std::vector<calibration::TransferSample> all;
  auto add_fits = [&](const std::string& kind, const std::vector<calibration::TransferSample>& samples) {
    const struct {
      const char* name;
      double lo, hi;
    } ranges[] = {{"all", 0, 1e300}, {"small", 0, 64 * KiB}, {"large", 1 * MiB, 1e300}};
    for (const auto& r : ranges) {
      const auto in = calibration::in_size_range(samples, r.lo, r.hi);
      try {
        c.transfer_fits.push_back({kind, r.name, calibration::fit_alpha_beta(in)});
      } catch (const std::invalid_argument& e) {
        // Small messages whose times do not grow with the size pay only the call's fixed
        // cost: that latency is what the small range is for (launch_us).
        if (std::string(r.name) == "small" && !in.empty()) {
          c.transfer_fits.push_back({kind, r.name, calibration::fit_latency_only(in)});
          c.notes.push_back(fmt::format("{} small range: latency only ({})", kind, e.what()));
        } else {
          c.notes.push_back(fmt::format("{} {} range not fitted: {}", kind, r.name, e.what()));
        }
      }
    }
  };
  for (const auto& s : shapes) {
    std::vector<calibration::TransferSample> samples;
    for (const auto& m : c.gloo)
      if (m.kind == s.kind) samples.push_back({m.bytes, m.seconds, s.steps, s.factor});
    all.insert(all.end(), samples.begin(), samples.end());
    add_fits(s.kind, samples);
  }
  add_fits("all", all);
  if (c.fabric.ok) {
    std::vector<calibration::TransferSample> samples;
    for (const auto& m : c.fabric.pingpong) samples.push_back({m.bytes, m.seconds, 1, 1});
    add_fits("fabric", samples);
  }
  const double p2p = c.transfer("send_recv").bandwidth;
  c.ring_efficiency = std::min(1.0, c.transfer("all_reduce").bandwidth / p2p);
  c.gather_efficiency = std::min(1.0, c.transfer("all_gather").bandwidth / p2p);
}

}  // namespace

const calibration::AlphaBetaFit& Calibration::transfer(const std::string& kind, const std::string& range) const {
  for (const auto& f : transfer_fits)
    if (f.kind == kind && f.range == range) return f.fit;
  throw std::runtime_error("no " + kind + " fit over the " + range + " size range (see the notes)");
}

namespace {

struct GemmCase {
  std::string shape;
  double m, n, k;
};
struct AttentionCase {
  double heads, seq, head_dim;
};
struct AllBusyCase {
  std::string name, kernel;
  double m, n, k;
};

// Every benchmark case, so that the progress bar knows the total before anything runs.
struct BenchmarkPlan {
  std::vector<double> gloo_sizes, fabric_sizes;
  std::vector<std::string> memory_kernels{"add", "gelu", "layer_norm", "softmax", "copy"};
  std::vector<double> memory_sizes;
  std::vector<GemmCase> gemm_cases;
  std::vector<int> thread_counts{1};
  std::vector<AttentionCase> attention_cases;
  std::vector<AttentionCase> flash_cases;
  std::vector<AllBusyCase> all_busy_cases;

  int total() const {
    return static_cast<int>(gloo_sizes.size()) + 1 + 1 + static_cast<int>(all_busy_cases.size()) +
           static_cast<int>(memory_kernels.size() * memory_sizes.size()) + 1 +
           static_cast<int>(gemm_cases.size() * thread_counts.size()) + static_cast<int>(2 * attention_cases.size()) +
           static_cast<int>(flash_cases.size());
  }
};

BenchmarkPlan plan_benchmarks(bool q, int max_threads) {
  BenchmarkPlan p;
  p.gloo_sizes = q ? geometric(8, 8 * MiB, 4) : geometric(8, 128 * MiB, 4);
  p.fabric_sizes =
      q ? std::vector<double>{8, 64 * KiB, 1 * MiB} : std::vector<double>{8, 4 * KiB, 64 * KiB, 1 * MiB, 8 * MiB};
  // 64 elements: the per-kernel floor; then sizes past the caches into memory.
  p.memory_sizes =
      q ? std::vector<double>{64, 4096, 262144, 4194304} : std::vector<double>{64, 1024, 16384, 262144, 1048576, 4194304, 16777216};
  // A transformer layer's GEMMs at tensor degree 1 (op_cost.cpp's add_linear): tokens x out x in.
  for (int h : q ? std::vector<int>{256, 512} : std::vector<int>{256, 512, 768, 1024})
    for (int t : q ? std::vector<int>{256} : std::vector<int>{512, 1024}) {
      const double H = h, T = t;
      p.gemm_cases.push_back({fmt::format("qkv h{} t{}", h, t), T, 3 * H, H});
      p.gemm_cases.push_back({fmt::format("proj h{} t{}", h, t), T, H, H});
      p.gemm_cases.push_back({fmt::format("fc1 h{} t{}", h, t), T, 4 * H, H});
      p.gemm_cases.push_back({fmt::format("fc2 h{} t{}", h, t), T, H, 4 * H});
    }
  for (int s : q ? std::vector<int>{32, 64, 128, 256} : std::vector<int>{32, 64, 128, 256, 512, 1024})
    p.gemm_cases.push_back({fmt::format("square {}", s), double(s), double(s), double(s)});
  if (max_threads > 1) p.thread_counts.push_back(max_threads);
  p.attention_cases = q ? std::vector<AttentionCase>{{4, 256, 64}, {8, 256, 32}}
                        : std::vector<AttentionCase>{{12, 256, 64}, {12, 1024, 64}, {16, 512, 32}, {8, 512, 128}};
  // FlashAttention over the sequences and head sizes a layer has (its tiles are 128 x 256:
  // short sequences are one tile, long ones skip the masked half).
  p.flash_cases = q ? std::vector<AttentionCase>{{4, 256, 64}, {4, 512, 32}}
                    : std::vector<AttentionCase>{{8, 128, 32}, {4, 256, 64}, {4, 512, 64}, {2, 1024, 64},
                                                 {1, 2048, 64}, {4, 512, 32}, {2, 512, 128}};
  // One call of each of a mid-size layer's kernels (h 512, 1024 tokens), alone and on
  // every core at once: what a core keeps of its speed while all compute.
  if (max_threads > 1) {
    const double H = 512, T = 1024, E = 4194304;
    p.all_busy_cases = {{"qkv h512 t1024", "gemm", T, 3 * H, H}, {"proj h512 t1024", "gemm", T, H, H},
                        {"fc1 h512 t1024", "gemm", T, 4 * H, H}, {"fc2 h512 t1024", "gemm", T, H, 4 * H},
                        {"add 4194304", "add", E, 0, 0},          {"gelu 4194304", "gelu", E, 0, 0},
                        {"layer_norm 4194304", "layer_norm", E, 0, 0}, {"softmax 4194304", "softmax", E, 0, 0}};
  }
  return p;
}

// Runs every case of the plan into c's raw measurements; tick(what) before each.
void run_benchmarks(Calibration& c, const BenchmarkPlan& p, bool q, const std::function<void(const char*)>& tick) {
  const double target = q ? 0.02 : 0.15;  // seconds of timing per compute case
  // 1. Gloo first: its peer is forked, which is only safe before LibTorch's thread pools exist.
  c.gloo = detail::bench_gloo(p.gloo_sizes, q, tick);
  tick("libfabric");
  c.fabric = detail::probe_libfabric(p.fabric_sizes, q ? 0.03 : 0.2);
  tick("FMA peak");
  c.fma_loop_flops = detail::fma_peak_flops(1, q ? 0.1 : 0.4, c.fma_isa);
  c.fma_loop_flops_all = c.max_threads > 1 ? detail::fma_peak_flops(c.max_threads, q ? 0.1 : 0.4, c.fma_isa)
                                           : c.fma_loop_flops;
  for (const auto& k : p.memory_kernels)
    for (double n : p.memory_sizes) {
      tick("element-wise kernels");
      c.memory.push_back(detail::bench_memory(k, n, 1, target));
    }
  tick("copy, every thread");
  c.memory.push_back(detail::bench_memory("copy", p.memory_sizes.back(), c.max_threads, target));
  for (int threads : p.thread_counts)
    for (const auto& g : p.gemm_cases) {
      tick("matmul");
      c.gemm.push_back(detail::bench_gemm(g.shape, g.m, g.n, g.k, threads, target));
    }
  for (const auto& a : p.attention_cases)
    for (const char* product : {"qk", "av"}) {
      tick("attention bmm");
      c.attention.push_back(detail::bench_attention(product, a.heads, a.seq, a.head_dim, target));
    }
  for (const auto& a : p.flash_cases) {
    tick("flash attention");
    c.flash.push_back(detail::bench_flash(a.heads, a.seq, a.head_dim, target));
  }
  for (const auto& a : p.all_busy_cases) {
    tick("every core busy");
    c.all_busy.push_back(detail::bench_all_busy(a.name, a.kernel, a.m, a.n, a.k, c.max_threads, q ? 0.2 : 0.5, q ? 1 : 3));
  }
  at::set_num_threads(c.max_threads);
}

// The peaks the fits divide by: the FMA loop's, raised to the best matmul rate measured
// with the same threads where that is higher.
void settle_peak(Calibration& c) {
  double best_1 = 0, best_all = 0;
  for (const auto& g : c.gemm) {
    const double rate = 2.0 * g.m * g.n * g.k / g.seconds;
    (g.threads == 1 ? best_1 : best_all) = std::max(g.threads == 1 ? best_1 : best_all, rate);
  }
  c.fma_peak_flops = std::max(c.fma_loop_flops, best_1);
  c.fma_peak_flops_all = c.max_threads > 1 ? std::max(c.fma_loop_flops_all, best_all) : c.fma_peak_flops;
  if (best_1 > c.fma_loop_flops) c.peak_source = "best matmul";
}

// The compute fits. One rank is one core with one thread: the 1-thread samples make the profile.
void fit_compute(Calibration& c) {
  // The tiny tensors give the per-kernel floor, the ones far past the caches (>= 16 MiB
  // moved, as a layer's activations are) the bandwidth; the cache-resident sizes between
  // are kept as raw data but would make a single bandwidth per kernel meaningless.
  std::vector<calibration::MemorySample> mem;
  for (const auto& m : c.memory)
    if (m.threads == 1 && (m.elements <= 64 || m.bytes >= kMemoryFitMinBytes)) mem.push_back({m.kernel, m.bytes, m.seconds});
  c.memory_fit = calibration::fit_memory(mem);
  const double hbm_bw = c.memory_fit.bandwidth_of("copy");
  // The estimator's forward element-wise bytes per token (op_cost.cpp): two LayerNorms 8h,
  // GeLU 4f = 16h, two bias-dropout-residual adds 14h.
  c.hbm_efficiency = std::min(
      1.0, calibration::weighted_memory_efficiency(c.memory_fit, {{"layer_norm", 8}, {"gelu", 16}, {"add", 14}}, hbm_bw));
  // The last sample: the copy of the largest size with every thread; never below what one
  // thread copies alone (a busy second core must not make the memory system look slower).
  c.copy_bandwidth_all = std::max(hbm_bw, c.memory.back().bytes / c.memory.back().seconds);

  auto gemm_samples = [&](int threads) {
    std::vector<calibration::GemmSample> s;
    for (const auto& g : c.gemm)
      if (g.threads == threads) s.push_back({g.m, g.n, g.k, g.seconds});
    return s;
  };
  settle_peak(c);
  c.gemm_fit = calibration::fit_gemm(gemm_samples(1), c.fma_peak_flops, c.memory_fit.kernel_overhead);
  c.gemm_fit_all = c.max_threads > 1 ? calibration::fit_gemm(gemm_samples(c.max_threads), c.fma_peak_flops_all,
                                                             c.memory_fit.kernel_overhead)
                                     : c.gemm_fit;
  std::vector<calibration::BmmSample> bmm;
  for (const auto& a : c.attention) {
    if (a.product == "qk") bmm.push_back({a.heads, a.seq, a.seq, a.head_dim, a.head_dim, a.seconds});
    else bmm.push_back({a.heads, a.seq, a.head_dim, a.seq, a.head_dim, a.seconds});
  }
  c.attention_fit = calibration::fit_score_bmm(bmm, c.fma_peak_flops, c.memory_fit.kernel_overhead);
  std::vector<calibration::FlashSample> flash;
  for (const auto& f : c.flash) flash.push_back({f.heads, f.seq, f.head_dim, f.seconds});
  c.flash_fit = calibration::fit_flash(flash, c.fma_peak_flops, c.memory_fit.kernel_overhead);
  double alone = 0, busy = 0;
  for (const auto& a : c.all_busy) {
    alone += a.alone_seconds;
    busy += a.busy_seconds;
  }
  if (busy > 0) c.all_busy_speed = std::clamp(alone / busy, 0.01, 1.0);
}

}  // namespace

std::vector<std::string> unusable_fits(const Calibration& c) {
  std::vector<std::string> out;
  const auto check = [&](const std::string& problem) {
    if (!problem.empty()) out.push_back(problem);
  };
  check(calibration::efficiency_fit_problem("gemm_1_thread", "max_efficiency", c.gemm_fit.max_efficiency,
                                            c.gemm_fit.residual, kMaxProfileFitRms, kMaxFitEfficiency));
  // The key is the head-dim curve's value at head_dim 128 (op_cost.cpp); what must lie in
  // (0, kMaxFitEfficiency] is the efficiency it implies at the head dims measured.
  double scale = 0;
  for (const auto& a : c.attention) scale = std::max(scale, calibration::score_bmm_head_dim_scale(a.head_dim));
  check(calibration::efficiency_fit_problem("attention", "score_bmm_efficiency x head-dim scale",
                                            c.attention_fit.score_bmm_efficiency * (scale > 0 ? scale : 1.0),
                                            c.attention_fit.residual, kMaxProfileFitRms, kMaxFitEfficiency));
  check(calibration::efficiency_fit_problem("flash_attention", "flash_efficiency", c.flash_fit.flash_efficiency,
                                            c.flash_fit.residual, kMaxProfileFitRms, kMaxFitEfficiency));
  return out;
}

Calibration calibrate(const CalibrationOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Calibration c;
  c.machine = machine_info();
  c.quick = options.quick;
  c.max_threads = options.max_threads > 0 ? options.max_threads : c.machine.cores;
  const BenchmarkPlan plan = plan_benchmarks(options.quick, c.max_threads);
  const int total = plan.total();
  int done = 0;
  auto tick = [&](const char* what) {
    if (options.progress) options.progress(done, total, what);
    ++done;
  };
  run_benchmarks(c, plan, options.quick, tick);
  if (options.progress) options.progress(total, total, "fitting");
  fit_compute(c);
  fit_transfers(c);
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c;
}

}  // namespace partune::kernels
