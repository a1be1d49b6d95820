// The instance-type file `partune calibrate` writes: the calibration's instance type
// through the scenario writer (costmodel/scenario_writer.hpp), a comment on each key saying
// where its value comes from, and the `calibration:` provenance, fits and raw data.
#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "partune/costmodel/scenario_writer.hpp"
#include "partune/kernels/calibrate.hpp"
#include "profile_text.hpp"

namespace partune::kernels {

namespace {

constexpr double KiB = 1024.0, MiB = 1024.0 * 1024.0, GiB = 1024.0 * MiB;

using detail::quoted;
using detail::residual_map;
using detail::residual_text;

std::string bytes_text(double b) {
  if (b >= MiB) return fmt::format("{:g} MiB", b / MiB);
  if (b >= KiB) return fmt::format("{:g} KiB", b / KiB);
  return fmt::format("{:g} B", b);
}

// Values the loader insists on being positive (latencies) or in (0, 1] (efficiencies).
double positive(double v, double floor) { return std::max(v, floor); }
double fraction(double v) { return std::clamp(v, 1e-4, 1.0); }
// gpu.attention.score_bmm_efficiency is the head-dim curve's value at head_dim 128: up to
// 2 (the efficiency it implies at head_dim 32 is then 1), capped in use by max_efficiency.
double score_key(double v) { return std::clamp(v, 1e-4, 2.0); }

}  // namespace

namespace {

// A collective's fixed cost: what the small all-reduces / all-gathers take per call beyond
// the per-step latency the links already count (a send/recv's) (2 steps for a 2-rank ring all-reduce, 1
// for an all-gather), from the small-size fits. Seconds.
double launch_latency(const Calibration& c, const char* kind, double steps) {
  try {
    return std::max(0.0, steps * (c.transfer(kind, "small").latency - c.transfer("send_recv").latency));
  } catch (const std::exception&) {
    return 0.0;
  }
}

// (MemTotal - max(2 GiB, 15%) for the OS) / ranks, floored to 0.1 GiB.
double per_rank_gib(const MachineInfo& m) {
  const double mem_gib = m.memory_bytes / GiB;
  return std::floor((mem_gib - std::max(2.0, 0.15 * mem_gib)) / m.cores * 10) / 10;
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
  k["gpu.peak_tflops.fp32"] =
      c.peak_source == "FMA loop"
          ? fmt::format("measured: independent {} FMA chains on one core, each thread on its own CPU clock, best of 3\n"
                        "runs ({:.1f} GFLOP/s; {} threads at once: {:.1f} GFLOP/s in all)",
                        c.fma_isa, c.fma_peak_flops / 1e9, c.max_threads, c.fma_peak_flops_all / 1e9)
          : fmt::format("measured: the best 1-thread matmul ({:.1f} GFLOP/s), above what the {} FMA loop read\n"
                        "({:.1f} GFLOP/s; a matmul cannot beat the peak); {} threads: {:.1f} GFLOP/s in all",
                        c.fma_peak_flops / 1e9, c.fma_isa, c.fma_loop_flops / 1e9, c.max_threads,
                        c.fma_peak_flops_all / 1e9);
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
  if (!c.layer.samples.empty()) {
    k["gpu.layer_overhead_us.forward"] = fmt::format(
        "measured: the backend's own layer (h {}, {} heads, ffn {}) on one sequence of a few\n"
        "tokens, 1 thread (calibration.measurements.layer), less the plan's time for it on this profile:\n"
        "the intercept at zero tokens of the least-squares line through what remains",
        c.layer.hidden, c.layer.heads, c.layer.ffn_hidden);
    k["gpu.layer_overhead_us.backward"] = "measured as forward: its backward";
  }
  k["gpu.gemm.max_efficiency"] = fmt::format(
      "fitted: torch::matmul fp32, 1 thread, {} shapes (a layer's qkv/proj/fc1/fc2 and a\n"
      "square sweep), eff = max_efficiency k/(k + k_half) of the fp32 peak; {}",
      c.gemm_fit.residual.samples, residual_text(c.gemm_fit.residual));
  k["gpu.gemm.tile"] = "a core has no output tiles or waves to quantize";
  k["gpu.gemm.k_half"] = "fitted with max_efficiency";
  k["gpu.attention.flash_efficiency"] = fmt::format(
      "fitted: partune's CPU FlashAttention (kernels/flash_attention.hpp), causal, forward +\n"
      "backward, 1 thread, (heads, seq, head_dim) under calibration:, t = 1.75 F / (peak eff) + 2 overhead,\n"
      "eff = flash_efficiency s / (s + flash_seq_half) (hardware.hpp's FlashCurve); {}",
      residual_text(c.flash_fit.residual));
  k["gpu.attention.flash_seq_half"] = "fitted with flash_efficiency (0: the samples' one sequence length)";
  k["gpu.attention.kernel"] = "partune's own kernel";
  k["gpu.attention.flash_fp32"] = "that kernel is fp32";
  k["gpu.attention.score_bmm_efficiency"] = fmt::format(
      "fitted: torch::bmm Q K^T and A V, 1 thread, (heads, seq, head_dim) under calibration:; the\n"
      "estimator scales this key by (d/(d+64))/(128/192); {}",
      residual_text(c.attention_fit.residual));
  k["gpu.attention.score_bytes_fwd"] =
      "[local-cpu] LibTorch CPU keeps scores in fp32 (4 bytes), twice the GPU profiles' 12";
}

// Where each link, host and collective value comes from.
void add_link_comments(const Calibration& c, std::map<std::string, std::string>& k) {
  const auto& p2p = c.transfer("send_recv");
  k["intra_node.fabric"] = "Gloo's tcp transport over 127.0.0.1, what `partune run --nproc N` uses";
  k["intra_node.bw_GBps"] = fmt::format(
      "fitted: Gloo send/recv ping-pong, 2 processes, {} .. {}, t = latency + bytes / bw; {}\n"
      "(each collective algorithm below reaches its intra_efficiency of it)",
      bytes_text(p2p.min_bytes), bytes_text(p2p.max_bytes), residual_text(p2p.residual));
  k["intra_node.latency_us"] = "fitted with bw_GBps (one way)";
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
  k["host.memory_bw_GBps"] = fmt::format(
      "measured: the {}-thread copy_ rate above, read + write (each byte twice): the host\n"
      "optimizer's memory traffic (offload_optimizer)",
      c.max_threads);
  k["host.all_busy_speed"] = fmt::format(
      "measured: a layer's kernels (h 512, 1024 tokens: 4 GEMMs, add, gelu,\n"
      "layer_norm, softmax), one call each, alone vs on all {} cores at once",
      c.max_threads);
  k["collectives.ring.net_efficiency"] = "fitted: Gloo all_reduce bandwidth (ring formula) / send/recv bandwidth";
  k["collectives.ring.intra_efficiency"] = "the same ratio: the ranks share this one host's loopback";
  k["collectives.ring.reduce_scatter_as_all_reduce"] =
      "Gloo in LibTorch 1.13 has no reduce-scatter: the backend all-reduces and keeps its part\n"
      "(backend/runtime/src/executor_collectives.cpp, tensor_parallel.cpp)";
  k["collectives.all_to_all.intra_efficiency"] = "the same ratio, on this host's loopback";
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
  g.attention.kernel = AttentionKernel::partune;
  g.attention.flash_efficiency = fraction(c.flash_fit.flash_efficiency);
  g.attention.flash_seq_half = c.flash_fit.seq_half;
  g.attention.score_bmm_efficiency = score_key(c.attention_fit.score_bmm_efficiency);
  g.attention.score_bytes_fwd = 24;
  g.attention.score_bytes_bwd = 48;
  g.attention.flash_fp32 = true;
  const auto& p2p = c.transfer("send_recv");
  it.intra_node_fabric = "loopback";
  it.intra_node = {p2p.bandwidth, positive(p2p.latency, 1e-8), 1.0};
  it.nics_per_node = 1;
  it.nic = {p2p.bandwidth, positive(p2p.latency, 1e-8), 1.0};
  it.pcie_bw = c.copy_bandwidth_all;
  it.gpus_per_pcie_switch = m.cores;
  it.host_cores = m.cores;
  it.host_memory_bytes = m.memory_bytes;
  it.host_memory_bw = 2.0 * c.copy_bandwidth_all;  // a copy reads and writes each byte
  if (!c.all_busy.empty()) it.host_all_busy_speed = fraction(c.all_busy_speed);
  if (!c.layer.samples.empty()) {  // against the plan on the profile above
    const LayerOverhead lo = fit_layer_overhead(c.layer, g);
    g.layer_overhead_fwd = lo.forward;
    g.layer_overhead_bwd = lo.backward;
  }
  // Gloo on CPU: the rank's own core does the copies and the syscalls (no overlap); it has
  // no tree all-reduce (as ring) and no reduce-scatter (the backend all-reduces). The
  // links are the send/recv rate; each algorithm reaches its measured share of it.
  const double ring = fraction(c.ring_efficiency), gather = fraction(c.gather_efficiency);
  it.ring = {ring, 0.0, launch_latency(c, "all_reduce", 2), ring, true};
  it.tree = it.ring;
  it.all_to_all = {gather, 0.0, launch_latency(c, "all_gather", 1), gather, true};
  return it;
}

namespace {

// The fitted models, under calibration.fits.
void write_fits(std::ostringstream& y, const Calibration& c) {
  const auto& mf = c.memory_fit;
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
  y << fmt::format("}}}}\n");  // closes bandwidth_GBps and memory
  y << fmt::format("    attention: {{score_bmm_efficiency: {:.4f}, {}}}\n", c.attention_fit.score_bmm_efficiency,
                   residual_map(c.attention_fit.residual));
  y << fmt::format("    flash_attention: {{flash_efficiency: {:.4f}, {}}}\n", c.flash_fit.flash_efficiency,
                   residual_map(c.flash_fit.residual));
  y << "    transfers:                    # t = steps x latency + factor x bytes / bandwidth; ranges: small <= 64 KiB, large >= 1 MiB\n";
  for (const auto& f : c.transfer_fits)
    y << fmt::format("      - {{kind: {}, range: {}, latency_us: {:.3f}, bandwidth_GBps: {}, min_bytes: {:.0f}, max_bytes: {:.0f}, {}}}\n",
                     f.kind, f.range, f.fit.latency * 1e6,
                     f.fit.bandwidth > 0 ? fmt::format("{:.4f}", f.fit.bandwidth / 1e9) : "null",  // latency only
                     f.fit.min_bytes, f.fit.max_bytes, residual_map(f.fit.residual));
}

// Provenance and fits: the start of the `calibration:` mapping (the loader accepts it and
// does not read it).
void write_provenance(std::ostringstream& y, const Calibration& c, const std::string& command_line) {
  const MachineInfo& m = c.machine;
  const int cores = m.cores;
  const double mem_gib = m.memory_bytes / GiB;
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
  write_fits(y, c);
  detail::write_notes(y, c.notes);
}

// The raw measurements, under calibration.measurements.
void write_measurements(std::ostringstream& y, const Calibration& c) {
  y << "  measurements:\n";
  y << fmt::format("    fma_peak: {{isa: {}, one_core_GFLOPs: {:.2f}, threads: {}, all_threads_GFLOPs: {:.2f}}}\n", c.fma_isa,
                   c.fma_loop_flops / 1e9, c.max_threads, c.fma_loop_flops_all / 1e9);
  y << fmt::format("    fp32_peak: {{source: {}, one_core_GFLOPs: {:.2f}, all_threads_GFLOPs: {:.2f}}}\n", c.peak_source,
                   c.fma_peak_flops / 1e9, c.fma_peak_flops_all / 1e9);
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
  y << "    flash_attention:              # [heads, seq, head_dim, seconds, GFLOP/s on 1.75 x 4 heads seq^2 head_dim], causal, fwd+bwd, 1 thread\n";
  for (const auto& f : c.flash)
    y << fmt::format("      - [{:.0f}, {:.0f}, {:.0f}, {:.4e}, {:.2f}]\n", f.heads, f.seq, f.head_dim, f.seconds,
                     7.0 * f.heads * f.seq * f.seq * f.head_dim / f.seconds / 1e9);
  y << "    all_busy:                     # [kernel, cores busy, seconds alone, seconds with every core busy, speed kept]\n";
  for (const auto& a : c.all_busy)
    y << fmt::format("      - [{}, {}, {:.4e}, {:.4e}, {:.3f}]\n", quoted(a.kernel), a.threads, a.alone_seconds, a.busy_seconds,
                     a.alone_seconds / a.busy_seconds);
  if (!c.layer.samples.empty()) {
    y << "    layer:                        # [tokens, forward s, backward s], the backend's layer, medians, 1 thread\n";
    for (const auto& l : c.layer.samples)
      y << fmt::format("      - [{}, {:.4e}, {:.4e}]\n", l.tokens, l.forward, l.backward);
  }
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
