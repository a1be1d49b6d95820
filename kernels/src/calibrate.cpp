// calibrate(): runs the benchmarks in an order that keeps the Gloo peer's fork safe (before
// any thread pool exists), fits the cost model's parameters, and renders the instance
// type file.
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
#include "partune/costmodel/scenario_writer.hpp"

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
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  m.date = date;
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  m.host = host;
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
        c.notes.push_back(fmt::format("{} {} range not fitted: {}", kind, r.name, e.what()));
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

Calibration calibrate(const CalibrationOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Calibration c;
  c.machine = machine_info();
  c.quick = options.quick;
  c.max_threads = options.max_threads > 0 ? options.max_threads : c.machine.cores;
  const bool q = options.quick;
  const double target = q ? 0.02 : 0.15;  // seconds of timing per compute case

  // The cases, so that the progress bar knows the total before anything runs.
  const std::vector<double> gloo_sizes = q ? geometric(8, 8 * MiB, 4) : geometric(8, 128 * MiB, 4);
  const std::vector<double> fabric_sizes =
      q ? std::vector<double>{8, 64 * KiB, 1 * MiB} : std::vector<double>{8, 4 * KiB, 64 * KiB, 1 * MiB, 8 * MiB};
  const std::vector<std::string> memory_kernels{"add", "gelu", "layer_norm", "softmax", "copy"};
  // 64 elements: the per-kernel floor; then sizes past the caches into memory.
  const std::vector<double> memory_sizes =
      q ? std::vector<double>{64, 4096, 262144, 4194304} : std::vector<double>{64, 1024, 16384, 262144, 1048576, 4194304, 16777216};
  struct GemmCase {
    std::string shape;
    double m, n, k;
  };
  std::vector<GemmCase> gemm_cases;
  // A transformer layer's GEMMs at tensor degree 1 (op_cost.cpp's add_linear): tokens x out x in.
  for (int h : q ? std::vector<int>{256, 512} : std::vector<int>{256, 512, 768, 1024})
    for (int t : q ? std::vector<int>{256} : std::vector<int>{512, 1024}) {
      const double H = h, T = t;
      gemm_cases.push_back({fmt::format("qkv h{} t{}", h, t), T, 3 * H, H});
      gemm_cases.push_back({fmt::format("proj h{} t{}", h, t), T, H, H});
      gemm_cases.push_back({fmt::format("fc1 h{} t{}", h, t), T, 4 * H, H});
      gemm_cases.push_back({fmt::format("fc2 h{} t{}", h, t), T, H, 4 * H});
    }
  for (int s : q ? std::vector<int>{32, 64, 128, 256} : std::vector<int>{32, 64, 128, 256, 512, 1024})
    gemm_cases.push_back({fmt::format("square {}", s), double(s), double(s), double(s)});
  std::vector<int> thread_counts{1};
  if (c.max_threads > 1) thread_counts.push_back(c.max_threads);
  struct AttentionCase {
    double heads, seq, head_dim;
  };
  const std::vector<AttentionCase> attention_cases =
      q ? std::vector<AttentionCase>{{4, 256, 64}, {8, 256, 32}}
        : std::vector<AttentionCase>{{12, 256, 64}, {12, 1024, 64}, {16, 512, 32}, {8, 512, 128}};

  // One call of each of a mid-size layer's kernels (h 512, 1024 tokens), alone and on
  // every core at once: what a core keeps of its speed while all compute.
  struct AllBusyCase {
    std::string name, kernel;
    double m, n, k;
  };
  std::vector<AllBusyCase> all_busy_cases;
  if (c.max_threads > 1) {
    const double H = 512, T = 1024, E = 4194304;
    all_busy_cases = {{"qkv h512 t1024", "gemm", T, 3 * H, H}, {"proj h512 t1024", "gemm", T, H, H},
                      {"fc1 h512 t1024", "gemm", T, 4 * H, H}, {"fc2 h512 t1024", "gemm", T, H, 4 * H},
                      {"add 4194304", "add", E, 0, 0},          {"gelu 4194304", "gelu", E, 0, 0},
                      {"layer_norm 4194304", "layer_norm", E, 0, 0}, {"softmax 4194304", "softmax", E, 0, 0}};
  }
  const int total = static_cast<int>(gloo_sizes.size()) + 1 + 1 + static_cast<int>(all_busy_cases.size()) +
                    static_cast<int>(memory_kernels.size() * memory_sizes.size()) + 1 +
                    static_cast<int>(gemm_cases.size() * thread_counts.size()) +
                    static_cast<int>(2 * attention_cases.size());
  int done = 0;
  auto tick = [&](const char* what) {
    if (options.progress) options.progress(done, total, what);
    ++done;
  };

  // 1. Gloo first: its peer is forked, which is only safe before LibTorch's thread pools exist.
  c.gloo = detail::bench_gloo(gloo_sizes, q, tick);
  tick("libfabric");
  c.fabric = detail::probe_libfabric(fabric_sizes, q ? 0.03 : 0.2);
  tick("FMA peak");
  c.fma_peak_flops = detail::fma_peak_flops(1, q ? 0.1 : 0.4, c.fma_isa);
  c.fma_peak_flops_all = c.max_threads > 1 ? detail::fma_peak_flops(c.max_threads, q ? 0.1 : 0.4, c.fma_isa)
                                           : c.fma_peak_flops;

  for (const auto& k : memory_kernels)
    for (double n : memory_sizes) {
      tick("element-wise kernels");
      c.memory.push_back(detail::bench_memory(k, n, 1, target));
    }
  tick("copy, every thread");
  c.memory.push_back(detail::bench_memory("copy", memory_sizes.back(), c.max_threads, target));

  for (int threads : thread_counts)
    for (const auto& g : gemm_cases) {
      tick("matmul");
      c.gemm.push_back(detail::bench_gemm(g.shape, g.m, g.n, g.k, threads, target));
    }
  for (const auto& a : attention_cases)
    for (const char* product : {"qk", "av"}) {
      tick("attention bmm");
      c.attention.push_back(detail::bench_attention(product, a.heads, a.seq, a.head_dim, target));
    }
  for (const auto& a : all_busy_cases) {
    tick("every core busy");
    c.all_busy.push_back(detail::bench_all_busy(a.name, a.kernel, a.m, a.n, a.k, c.max_threads, q ? 0.2 : 0.5, q ? 1 : 3));
  }
  at::set_num_threads(c.max_threads);
  if (options.progress) options.progress(total, total, "fitting");

  // Fits. One rank is one core with one thread: the 1-thread samples make the profile.
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
  double alone = 0, busy = 0;
  for (const auto& a : c.all_busy) {
    alone += a.alone_seconds;
    busy += a.busy_seconds;
  }
  if (busy > 0) c.all_busy_speed = std::clamp(alone / busy, 0.01, 1.0);
  fit_transfers(c);
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return c;
}

// ---------------------------------------------------------------------------------------
// The file.

namespace {

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

std::string residual_text(const calibration::Residual& r) {
  return fmt::format("residual rms {:.1f}% max {:.1f}% over {} samples", 100 * r.rms_relative, 100 * r.max_relative,
                     r.samples);
}

std::string residual_map(const calibration::Residual& r) {
  return fmt::format("rms_relative_error: {:.4f}, max_relative_error: {:.4f}, samples: {}", r.rms_relative,
                     r.max_relative, r.samples);
}

std::string bytes_text(double b) {
  if (b >= MiB) return fmt::format("{:g} MiB", b / MiB);
  if (b >= KiB) return fmt::format("{:g} KiB", b / KiB);
  return fmt::format("{:g} B", b);
}

// Values the loader insists on being positive (latencies) or in (0, 1] (efficiencies).
double positive(double v, double floor) { return std::max(v, floor); }
double fraction(double v) { return std::clamp(v, 1e-4, 1.0); }

}  // namespace

namespace {

// A collective's fixed cost: what the small all-reduces / all-gathers take per call beyond
// the per-step latency the links already count (2 steps for a 2-rank ring all-reduce, 1
// for an all-gather), from the small-size fits. Seconds.
double launch_latency(const Calibration& c, const char* kind, double steps) {
  try {
    return std::max(0.0, steps * (c.transfer(kind, "small").latency - c.transfer("all").latency));
  } catch (const std::exception&) {
    return 0.0;
  }
}

// (MemTotal - max(2 GiB, 15%) for the OS) / ranks, floored to 0.1 GiB.
double per_rank_gib(const MachineInfo& m) {
  const double mem_gib = m.memory_bytes / GiB;
  return std::floor((mem_gib - std::max(2.0, 0.15 * mem_gib)) / m.cores * 10) / 10;
}

// What the estimator uses at head_dim 64 (GPT-2's), clamped by max_efficiency.
double bmm_efficiency_d64(const Calibration& c) {
  const double score_eff = fraction(c.attention_fit.score_bmm_efficiency);
  return std::min(score_eff * calibration::score_bmm_head_dim_scale(64), c.gemm_fit.max_efficiency);
}

// The file's header: what measured it, where, and how to read the rest.
std::string profile_header(const Calibration& c, const std::string& command_line) {
  const MachineInfo& m = c.machine;
  return fmt::format(
      "Measured profile of this machine, written by `{}` on {}.\n"
      "Host {}: {}, {} cores, {:.1f} GiB RAM; LibTorch {}; Gloo: {}; libfabric {}{}.\n"
      "Calibration took {:.0f} s{}.\n"
      "One rank = one core running one LibTorch intra-op thread (like local-cpu.yaml), so\n"
      "gpus_per_node = the cores. Each fitted value names the measurements it was fitted to\n"
      "(least squares on the relative time error, the estimator's own formula) and the fit's\n"
      "residual; the raw measurements and every fit are under `calibration:` (not read by\n"
      "the loader). [machine] values come from /proc; [local-cpu] values repeat\n"
      "local-cpu.yaml's reasoning because nothing here measures them.",
      command_line, m.date, m.host, m.cpu_model, m.cores, m.memory_bytes / GiB, m.libtorch, m.gloo, m.libfabric,
      m.blas_core.empty() ? "" : "; OpenBLAS core " + m.blas_core, c.seconds,
      c.quick ? " (--quick: fewer shapes and sizes, short timings; rerun without it for a profile to keep)" : "");
}

// Where each GPU (here: core) value comes from.
void add_device_comments(const Calibration& c, std::map<std::string, std::string>& k) {
  const MachineInfo& m = c.machine;
  const auto& mf = c.memory_fit;
  k["gpus_per_node"] = "[machine] cores this process may run on, one rank each";
  k["gpu.peak_tflops.fp32"] = fmt::format(
      "measured: 16 independent {} FMA chains on one core, best of 3 runs\n({:.1f} GFLOP/s; {} threads at once: {:.1f} "
      "GFLOP/s in all)",
      c.fma_isa, c.fma_peak_flops / 1e9, c.max_threads, c.fma_peak_flops_all / 1e9);
  for (const char* p : {"tf32", "fp16", "bf16"})
    k[std::string("gpu.peak_tflops.") + p] = "[local-cpu] LibTorch CPU computes in fp32: modelled at the fp32 rate";
  k["gpu.hbm_GiB"] = fmt::format("[machine] (MemTotal {:.1f} GiB - max(2 GiB, 15%) for the OS) / {} ranks",
                                 m.memory_bytes / GiB, m.cores);
  k["gpu.hbm_bw_GBps"] = "measured and fitted: LibTorch copy_ (read + write), 1 thread, t = kernel_overhead +\n"
                         "bytes / bw over 64 elements and tensors moving >= 16 MiB (past the caches)";
  k["gpu.hbm_efficiency"] = fmt::format(
      "fitted: add {:.2f}, gelu {:.2f}, layer_norm {:.2f} GB/s (softmax {:.2f}), 1 thread,\n"
      "weighted by the estimator's per-token bytes (LayerNorm 8h, GeLU 16h, adds 14h) / hbm_bw",
      mf.bandwidth_of("add") / 1e9, mf.bandwidth_of("gelu") / 1e9, mf.bandwidth_of("layer_norm") / 1e9,
      mf.bandwidth_of("softmax") / 1e9);
  k["gpu.kernel_overhead_us"] = fmt::format(
      "fitted: the shared intercept of t = overhead + bytes / bw_kernel over every 1-thread\n"
      "element-wise sample of 64 or >= 16 MiB (autograd recording, as in training); {}",
      residual_text(mf.residual));
  k["gpu.reserved_GiB"] = "[local-cpu] LibTorch runtime, Gloo buffers, allocator slack";
  k["gpu.gemm.max_efficiency"] = fmt::format(
      "fitted: torch::matmul fp32, 1 thread, {} shapes (a layer's qkv/proj/fc1/fc2 and a\n"
      "square sweep), eff = max_efficiency k/(k + k_half) of the fp32 peak; {}",
      c.gemm_fit.residual.samples, residual_text(c.gemm_fit.residual));
  k["gpu.gemm.tile"] = "a core has no output tiles or waves to quantize";
  k["gpu.gemm.k_half"] = "fitted with max_efficiency";
  k["gpu.attention.flash_efficiency"] =
      fmt::format("LibTorch {} has no fused CPU attention: the measured unfused bmm rate at head_dim 64", m.libtorch);
  k["gpu.attention.score_bmm_efficiency"] = fmt::format(
      "fitted: torch::bmm Q K^T and A V, 1 thread, (heads, seq, head_dim) under calibration:; the\n"
      "estimator scales this key by (d/(d+64))/(128/192); {}",
      residual_text(c.attention_fit.residual));
  k["gpu.attention.score_bytes_fwd"] =
      "[local-cpu] LibTorch CPU keeps scores in fp32 (4 bytes), twice the GPU profiles' 12";
}

// Where each link, host and collective value comes from.
void add_link_comments(const Calibration& c, std::map<std::string, std::string>& k) {
  const auto& joint = c.transfer("all");
  const auto& p2p = c.transfer("send_recv");
  k["intra_node.fabric"] = "Gloo's tcp transport over 127.0.0.1, what `partune run --nproc N` uses";
  k["intra_node.bw_GBps"] = fmt::format(
      "fitted: every Gloo measurement (all_reduce, all_gather, send/recv ping-pong; 2\n"
      "processes; {} .. {}) under the estimator's two-rank formulas; {}",
      bytes_text(joint.min_bytes), bytes_text(joint.max_bytes), residual_text(joint.residual));
  k["intra_node.latency_us"] = "fitted with bw_GBps";
  k["intra_node.efficiency"] = "bw_GBps is already a measured rate";
  k["network.nics_per_node"] = "loopback: one \"NIC\"";
  k["network.nic_bw_Gbps"] = fmt::format("fitted: Gloo send/recv ping-pong, {} .. {}, t = latency + bytes / bw; {}",
                                         bytes_text(p2p.min_bytes), bytes_text(p2p.max_bytes),
                                         residual_text(p2p.residual));
  k["network.latency_us"] = "fitted with nic_bw_Gbps (one way)";
  k["network.efficiency"] = "nic_bw_Gbps is already a measured rate";
  k["pcie.bw_GBps"] = fmt::format(
      "measured: \"host<->device\" is a memory copy; LibTorch copy_ with {} threads, {} elements\n"
      "(at least the 1-thread rate), shared by the ranks below",
      c.max_threads, c.memory.empty() ? 0.0 : c.memory.back().elements);
  k["pcie.gpus_per_switch"] = "[machine] every rank shares the one memory system";
  k["host.cores"] = "[machine] sched_getaffinity";
  k["host.memory_GiB"] = "[machine] /proc/meminfo MemTotal";
  k["host.all_busy_speed"] = fmt::format(
      "measured: a layer's kernels (h 512, 1024 tokens: 4 GEMMs, add, gelu,\n"
      "layer_norm, softmax), one call each, alone vs on all {} cores at once",
      c.max_threads);
  k["collectives.ring.net_efficiency"] = "fitted: Gloo all_reduce bandwidth (ring formula) / send/recv bandwidth";
  k["collectives.ring.launch_us"] = "fitted: small (<= 64 KiB) all_reduce latency, 2 steps, beyond the link latency\n"
                                    "(ProcessGroupGloo hands each collective to a worker thread)";
  k["collectives.ring.compute_overlap"] = "[local-cpu] one core per rank: communication and compute take turns";
  k["collectives.tree.net_efficiency"] = "Gloo has no tree all-reduce: as ring";
  k["collectives.all_to_all.net_efficiency"] =
      "fitted: Gloo all_gather bandwidth / send/recv bandwidth (the sharded gathers)";
  k["collectives.all_to_all.launch_us"] = "fitted: small (<= 64 KiB) all_gather latency beyond the link latency";
}

// Where each value comes from, after its key in the file.
YamlComments profile_comments(const Calibration& c, const std::string& command_line) {
  YamlComments y;
  y.header = profile_header(c, command_line);
  add_device_comments(c, y.keys);
  add_link_comments(c, y.keys);
  return y;
}

}  // namespace

InstanceType measured_instance_type(const Calibration& c, const std::string& name) {
  const MachineInfo& m = c.machine;
  InstanceType it;
  it.name = name;
  it.gpus_per_node = m.cores;
  GpuProfile& g = it.gpu;
  g.name = fmt::format("cpu-core ({}, 1 LibTorch thread)", m.cpu_model);
  // LibTorch CPU computes in fp32: every precision is modelled at the fp32 rate.
  g.peak_flops_fp32 = g.peak_flops_tf32 = g.peak_flops_fp16 = g.peak_flops_bf16 = c.fma_peak_flops;
  g.hbm_bytes = per_rank_gib(m) * GiB;
  g.hbm_bw = c.memory_fit.bandwidth_of("copy");
  g.hbm_efficiency = c.hbm_efficiency;
  g.kernel_overhead = c.memory_fit.kernel_overhead;
  g.reserved_bytes = 0.5 * GiB;
  g.gemm = {fraction(c.gemm_fit.max_efficiency), 1, 1, c.gemm_fit.k_half};
  g.attention = {fraction(bmm_efficiency_d64(c)), fraction(c.attention_fit.score_bmm_efficiency), 24, 48};
  const auto& joint = c.transfer("all");
  const auto& p2p = c.transfer("send_recv");
  it.intra_node_fabric = "loopback";
  it.intra_node = {joint.bandwidth, positive(joint.latency, 1e-8), 1.0};
  it.nics_per_node = 1;
  it.nic = {p2p.bandwidth, positive(p2p.latency, 1e-8), 1.0};
  it.pcie_bw = c.copy_bandwidth_all;
  it.gpus_per_pcie_switch = m.cores;
  it.host_cores = m.cores;
  it.host_memory_bytes = m.memory_bytes;
  if (!c.all_busy.empty()) it.host_all_busy_speed = fraction(c.all_busy_speed);
  // Gloo on CPU: the rank's own core does the copies and the syscalls (no overlap); it has
  // no tree all-reduce (as ring).
  it.ring = {fraction(c.ring_efficiency), 0.0, launch_latency(c, "all_reduce", 2)};
  it.tree = it.ring;
  it.all_to_all = {fraction(c.gather_efficiency), 0.0, launch_latency(c, "all_gather", 1)};
  return it;
}

namespace {

// Provenance and fits: the start of the `calibration:` mapping (the loader accepts it and
// does not read it).
void write_provenance(std::ostringstream& y, const Calibration& c, const std::string& command_line) {
  const MachineInfo& m = c.machine;
  const int cores = m.cores;
  const double mem_gib = m.memory_bytes / GiB;
  const auto& mf = c.memory_fit;
  // Provenance, fits and raw data: a mapping the loader accepts and does not read.
  y << "calibration:\n";
  y << "  date: " << quoted(m.date) << "\n";
  y << "  host: " << quoted(m.host) << "\n";
  y << "  cpu_model: " << quoted(m.cpu_model) << "\n";
  y << "  cores: " << cores << "\n";
  y << fmt::format("  memory_GiB: {:.2f}\n", mem_gib);
  y << "  libtorch: " << quoted(m.libtorch) << "\n";
  y << "  gloo: " << quoted(m.gloo) << "\n";
  y << "  libfabric: " << quoted(m.libfabric) << "\n";
  y << "  blas_core: " << quoted(m.blas_core.empty() ? "unknown (not OpenBLAS, or not visible)" : m.blas_core) << "\n";
  y << "  command: " << quoted(command_line) << "\n";
  y << "  quick: " << (c.quick ? "true" : "false") << "\n";
  y << fmt::format("  seconds: {:.1f}\n", c.seconds);
  y << "  fits:\n";
  y << fmt::format("    gemm_1_thread: {{max_efficiency: {:.4f}, k_half: {:.2f}, peak_GFLOPs: {:.2f}, {}}}\n",
                   c.gemm_fit.max_efficiency, c.gemm_fit.k_half, c.fma_peak_flops / 1e9, residual_map(c.gemm_fit.residual));
  y << fmt::format("    gemm_{}_threads: {{max_efficiency: {:.4f}, k_half: {:.2f}, peak_GFLOPs: {:.2f}, {}}}\n", c.max_threads,
                   c.gemm_fit_all.max_efficiency, c.gemm_fit_all.k_half, c.fma_peak_flops_all / 1e9,
                   residual_map(c.gemm_fit_all.residual));
  y << fmt::format("    memory: {{kernel_overhead_us: {:.3f}, {}, bandwidth_GBps: {{", mf.kernel_overhead * 1e6,
                   residual_map(mf.residual));
  for (std::size_t i = 0; i < mf.bandwidth.size(); ++i)
    y << fmt::format("{}{}: {:.3f}", i ? ", " : "", mf.bandwidth[i].first, mf.bandwidth[i].second / 1e9);
  y << "}}\n";
  y << fmt::format("    attention: {{score_bmm_efficiency: {:.4f}, {}}}\n", c.attention_fit.score_bmm_efficiency,
                   residual_map(c.attention_fit.residual));
  y << "    transfers:                    # t = steps x latency + factor x bytes / bandwidth; ranges: small <= 64 KiB, large >= 1 MiB\n";
  for (const auto& f : c.transfer_fits)
    y << fmt::format("      - {{kind: {}, range: {}, latency_us: {:.3f}, bandwidth_GBps: {:.4f}, min_bytes: {:.0f}, max_bytes: {:.0f}, {}}}\n",
                     f.kind, f.range, f.fit.latency * 1e6, f.fit.bandwidth / 1e9, f.fit.min_bytes, f.fit.max_bytes,
                     residual_map(f.fit.residual));
  y << "  notes:";
  if (c.notes.empty()) y << " []";
  y << "\n";
  for (const auto& n : c.notes) y << "    - " << quoted(n) << "\n";
}

// The raw measurements, under calibration.measurements.
void write_measurements(std::ostringstream& y, const Calibration& c) {
  y << "  measurements:\n";
  y << fmt::format("    fma_peak: {{isa: {}, one_core_GFLOPs: {:.2f}, threads: {}, all_threads_GFLOPs: {:.2f}}}\n", c.fma_isa,
                   c.fma_peak_flops / 1e9, c.max_threads, c.fma_peak_flops_all / 1e9);
  y << "    gemm:                         # [threads, m, n, k, seconds, GFLOP/s, shape]\n";
  for (const auto& g : c.gemm)
    y << fmt::format("      - [{}, {:.0f}, {:.0f}, {:.0f}, {:.4e}, {:.2f}, {}]\n", g.threads, g.m, g.n, g.k, g.seconds,
                     2 * g.m * g.n * g.k / g.seconds / 1e9, quoted(g.shape));
  y << "    memory:                       # [kernel, threads, elements, bytes, seconds, GB/s]\n";
  for (const auto& e : c.memory)
    y << fmt::format("      - [{}, {}, {:.0f}, {:.0f}, {:.4e}, {:.3f}]\n", e.kernel, e.threads, e.elements, e.bytes, e.seconds,
                     e.bytes / e.seconds / 1e9);
  y << "    attention:                    # [product, heads, seq, head_dim, seconds, GFLOP/s], 1 thread\n";
  for (const auto& a : c.attention)
    y << fmt::format("      - [{}, {:.0f}, {:.0f}, {:.0f}, {:.4e}, {:.2f}]\n", a.product, a.heads, a.seq, a.head_dim, a.seconds,
                     2 * a.heads * a.seq * a.seq * a.head_dim / a.seconds / 1e9);
  y << "    all_busy:                     # [kernel, cores busy, seconds alone, seconds with every core busy, speed kept]\n";
  for (const auto& a : c.all_busy)
    y << fmt::format("      - [{}, {}, {:.4e}, {:.4e}, {:.3f}]\n", quoted(a.kernel), a.threads, a.alone_seconds, a.busy_seconds,
                     a.alone_seconds / a.busy_seconds);
  y << "    gloo:                         # [kind, bytes, seconds, GB/s]; 2 processes over loopback; send_recv one way\n";
  for (const auto& t : c.gloo)
    y << fmt::format("      - [{}, {:.0f}, {:.4e}, {:.4f}]\n", t.kind, t.bytes, t.seconds, t.bytes / t.seconds / 1e9);
  y << "    libfabric:\n";
  y << "      ok: " << (c.fabric.ok ? "true" : "false") << "\n";
  if (c.fabric.ok) {
    y << "      provider: " << quoted(c.fabric.provider) << "\n";
    y << "      fabric: " << quoted(c.fabric.fabric) << "\n";
    y << "      endpoint_type: " << c.fabric.endpoint_type << "\n";
  }
  y << "      note: " << quoted(c.fabric.note) << "\n";
  y << "      pingpong:                   # [bytes, seconds one way, GB/s], two endpoints on two threads of this process\n";
  for (const auto& t : c.fabric.pingpong)
    y << fmt::format("        - [{:.0f}, {:.4e}, {:.4f}]\n", t.bytes, t.seconds, t.bytes / t.seconds / 1e9);
}

}  // namespace

std::string instance_type_yaml(const Calibration& c, const std::string& name, const std::string& command_line) {
  std::ostringstream y;
  y << partune::instance_type_yaml(measured_instance_type(c, name), profile_comments(c, command_line));
  write_provenance(y, c, command_line);
  write_measurements(y, c);
  return y.str();
}

}  // namespace partune::kernels
