// `calibrate --device cuda` without LibTorch: the fits of the GPU's measurements (the cost
// model's own rules, against the datasheet file's peaks) and the instance-type file they
// make: the datasheet file with the measured values put in, a comment on each key saying
// which, and the `calibration:` provenance, fits and raw data.
#include "partune/kernels/gpu_calibrate.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/kernels/calibrate.hpp"
#include "profile_text.hpp"

namespace partune::kernels {

namespace {

constexpr double MiB = 1024.0 * 1024.0, GiB = 1024.0 * MiB;

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// gemm_efficiency() of the cost model with max_efficiency 1: the tile and wave
// quantisation factor times k / (k + k_half).
double quantisation(double tile, double sm_count, double k_half, double m, double n, double k) {
  GpuProfile rule;
  rule.gemm.max_efficiency = 1;
  rule.gemm.tile = tile;
  rule.gemm.sm_count = sm_count;
  rule.gemm.k_half = k_half;
  return gemm_efficiency(rule, m, n, k);
}

std::string first_line(const char* what) {
  const std::string s(what);
  return s.substr(0, s.find('\n'));
}

}  // namespace

std::string datasheet_instance_type_for(const std::string& name) {
  if (contains(name, "GH200")) return "";  // Grace Hopper: other power, clocks and memory
  if (contains(name, "H200")) return "h200-device";
  if (contains(name, "H100") && !contains(name, "PCIe") && !contains(name, "NVL")) return "h100-sxm-device";
  return "";
}

GpuGemmFit fit_gpu_gemm(const std::vector<calibration::GemmSample>& samples, double peak_flops, double kernel_overhead,
                        double sm_count, const std::vector<double>& tiles) {
  GpuGemmFit best;
  best.sm_count = sm_count;
  std::string failure = "GPU GEMM fit: no tile to try";
  for (double tile : tiles) {
    // t = 2 (m / q) n k / (peak max_eff k / (k + k_half)) + o with q the tile's known
    // quantisation: calibration::fit_gemm's rule on (m / q, n, k).
    std::vector<calibration::GemmSample> scaled;
    for (const auto& s : samples)
      scaled.push_back({s.m / quantisation(tile, sm_count, 0, s.m, s.n, s.k), s.n, s.k, s.seconds});
    try {
      const calibration::GemmFit f = calibration::fit_gemm(scaled, peak_flops, kernel_overhead);
      best.rms_by_tile.emplace_back(tile, f.residual.rms_relative);
      if (best.tile == 0 || f.residual.rms_relative < best.fit.residual.rms_relative) {
        best.fit = f;
        best.tile = tile;
      }
    } catch (const std::invalid_argument& e) {
      best.rms_by_tile.emplace_back(tile, std::numeric_limits<double>::quiet_NaN());
      failure = e.what();
    }
  }
  if (best.tile == 0) throw std::invalid_argument(failure);
  return best;
}

Fp8GemmFit fit_fp8_gemm(const std::vector<calibration::GemmSample>& samples, double fp8_peak_flops,
                        double kernel_overhead, const GpuGemmFit& bf16) {
  if (samples.empty()) throw std::invalid_argument("FP8 GEMM fit: no samples");
  // t = 2mnk / (peak q) u + o with u = 1 / fp8_max_efficiency, q the bf16 fit's quantisation
  // and k term: in relative least squares x u = 1 - o / t, u = sum(x y) / sum(x^2).
  const auto work = [&](const calibration::GemmSample& s) {
    return 2.0 * s.m * s.n * s.k /
           (fp8_peak_flops * quantisation(bf16.tile, bf16.sm_count, bf16.fit.k_half, s.m, s.n, s.k));
  };
  double xy = 0, xx = 0;
  for (const auto& s : samples) {
    if (!(s.seconds > 0)) throw std::invalid_argument("FP8 GEMM fit: a sample has a non-positive time");
    const double x = work(s) / s.seconds;
    xy += x * (1.0 - kernel_overhead / s.seconds);
    xx += x * x;
  }
  if (!(xy > 0)) throw std::invalid_argument("FP8 GEMM fit: the kernel overhead exceeds every measured time");
  Fp8GemmFit f;
  f.fp8_max_efficiency = xx / xy;
  double sum = 0;
  for (const auto& s : samples) {
    const double e = (work(s) / f.fp8_max_efficiency + kernel_overhead - s.seconds) / s.seconds;
    sum += e * e;
    f.residual.max_relative = std::max(f.residual.max_relative, std::abs(e));
  }
  f.residual.samples = static_cast<int>(samples.size());
  f.residual.rms_relative = std::sqrt(sum / static_cast<double>(samples.size()));
  return f;
}

namespace {

std::vector<calibration::GemmSample> gemm_samples(const GpuCalibration& c, const char* dtype) {
  std::vector<calibration::GemmSample> s;
  for (const auto& g : c.gemm)
    if (g.dtype == dtype) s.push_back({g.m, g.n, g.k, g.time.seconds});
  return s;
}

bool has_bandwidth(const calibration::MemoryFit& f, const std::string& kernel) {
  for (const auto& [name, bw] : f.bandwidth)
    if (name == kernel) return bw > 0;
  return false;
}

// A flash kernel's timed calls; those of a record that also accumulated the gradients into
// q, k and v's .grad with that time taken off at the add kernel's measured bandwidth.
std::vector<calibration::FlashSample> flash_samples(GpuCalibration& c, const char* kernel) {
  std::vector<calibration::FlashSample> s;
  bool accumulated = false;
  for (const auto& a : c.attention) {
    if (a.kernel != kernel) continue;
    calibration::FlashSample sample{a.batch_heads, a.seq, a.head_dim, a.time.seconds};
    if (a.gradients_accumulated && c.memory_measured && has_bandwidth(c.memory_fit, "add")) {
      sample = calibration::without_gradient_accumulation({sample}, c.memory_fit.bandwidth_of("add")).front();
      accumulated = true;
    }
    s.push_back(sample);
  }
  if (accumulated)
    c.notes.push_back(fmt::format("{}: the recorded calls also accumulated q, k and v's gradients; three adds at the "
                                  "measured add bandwidth taken off each",
                                  kernel));
  return s;
}

// The samples that take at least kMinOverheads kernel overheads. Back-to-back calls of a
// short kernel overlap the host's dispatch of the next with the GPU's work, so they take
// max(compute, dispatch), not the rule's compute + overhead; from 10 overheads on the
// difference is at most 10%. All are kept when fewer than 3 would be left (a note says so).
constexpr double kMinOverheads = 10;

template <class Sample>
std::vector<Sample> long_enough(GpuCalibration& c, const char* what, const std::vector<Sample>& samples,
                                double overhead) {
  std::vector<Sample> kept;
  for (const auto& s : samples)
    if (s.seconds >= kMinOverheads * overhead) kept.push_back(s);
  if (kept.size() == samples.size()) return kept;
  if (kept.size() < 3) {
    c.notes.push_back(
        fmt::format("{}: fitted on every sample, though only {} of {} take {:.0f} kernel overheads "
                    "({:.1f} us) or more",
                    what, kept.size(), samples.size(), kMinOverheads, overhead * 1e6));
    return samples;
  }
  c.notes.push_back(
      fmt::format("{}: {} of {} samples fitted, those taking at least {:.0f} kernel overheads ({:.1f} "
                  "us; shorter calls overlap the host's dispatch)",
                  what, kept.size(), samples.size(), kMinOverheads, overhead * 1e6));
  return kept;
}

// Runs one fit; a fit that cannot be made is a note, and the profile keeps the datasheet value.
bool try_fit(GpuCalibration& c, const char* what, const std::function<void()>& fit) {
  try {
    fit();
    return true;
  } catch (const std::exception& e) {
    c.notes.push_back(fmt::format("{} not fitted: {}", what, first_line(e.what())));
    return false;
  }
}

}  // namespace

void fit_gpu_calibration(GpuCalibration& c) {
  const GpuProfile& sheet = c.base.gpu;
  // Every element-wise sample: the 64-element ones give the per-kernel floor, the rest
  // (256 MiB and more) the bandwidths.
  std::vector<calibration::MemorySample> mem;
  for (const auto& m : c.memory) mem.push_back({m.kernel, m.bytes, m.time.seconds});
  c.memory_measured = !mem.empty() && try_fit(c, "element-wise kernels", [&] {
    c.memory_fit = calibration::fit_memory(mem);
    // The estimator's forward element-wise bytes per token (op_cost.cpp, as the CPU path).
    c.hbm_efficiency = calibration::weighted_memory_efficiency(
        c.memory_fit, {{"layer_norm", 8}, {"gelu", 16}, {"add", 14}}, sheet.hbm_bw);
  });
  const double overhead = c.memory_measured ? c.memory_fit.kernel_overhead : sheet.kernel_overhead;
  const double sm_count = c.gpu.sm_count > 0 ? c.gpu.sm_count : sheet.gemm.sm_count;
  const auto bf16 = long_enough(c, "bf16 GEMM", gemm_samples(c, "bf16"), overhead);
  c.gemm_measured = !bf16.empty() && try_fit(c, "bf16 GEMM", [&] {
    c.gemm_fit = fit_gpu_gemm(bf16, sheet.peak_flops_bf16, overhead, sm_count);
  });
  const auto fp8 = long_enough(c, "FP8 GEMM", gemm_samples(c, "fp8_e4m3"), overhead);
  if (!fp8.empty() && !c.gemm_measured)
    c.notes.push_back("FP8 GEMM not fitted: it takes the bf16 fit's tile and k_half");
  if (!fp8.empty() && !(sheet.peak_flops_fp8 > 0))
    c.notes.push_back("FP8 GEMM not fitted: the datasheet file has no fp8 peak");
  c.fp8_measured = !fp8.empty() && c.gemm_measured && sheet.peak_flops_fp8 > 0 && try_fit(c, "FP8 GEMM", [&] {
    c.fp8_fit = fit_fp8_gemm(fp8, sheet.peak_flops_fp8, overhead, c.gemm_fit);
  });
  std::vector<calibration::BmmSample> bmm;
  for (const auto& a : c.attention) {
    if (a.kernel == "qk") bmm.push_back({a.batch_heads, a.seq, a.seq, a.head_dim, a.head_dim, a.time.seconds});
    if (a.kernel == "av") bmm.push_back({a.batch_heads, a.seq, a.head_dim, a.seq, a.head_dim, a.time.seconds});
  }
  bmm = long_enough(c, "attention score bmm", bmm, overhead);
  c.score_bmm_measured = !bmm.empty() && try_fit(c, "attention score bmm", [&] {
    c.score_bmm_fit = calibration::fit_score_bmm(bmm, sheet.peak_flops_bf16, overhead);
  });
  const auto flash = flash_samples(c, "flash");
  c.flash_measured = !flash.empty() && try_fit(c, "partune's CUDA FlashAttention", [&] {
    c.flash_fit = calibration::fit_flash(flash, sheet.peak_flops_bf16, overhead, sheet.attention.flash_head_dim_half);
  });
  const auto sdpa = flash_samples(c, "sdpa");
  c.sdpa_measured = !sdpa.empty() && try_fit(c, "LibTorch's scaled_dot_product_attention", [&] {
    c.sdpa_fit = calibration::fit_flash(sdpa, sheet.peak_flops_bf16, overhead, sheet.attention.flash_head_dim_half);
  });
  for (const auto& t : c.copies)
    (t.direction == "host_to_device" ? c.host_to_device_bw : c.device_to_host_bw) = t.bytes / t.time.seconds;
}

std::vector<std::string> unusable_gpu_fits(const GpuCalibration& c) {
  std::vector<std::string> out;
  const auto check = [&](bool measured, const std::string& problem) {
    if (measured && !problem.empty()) out.push_back(problem);
  };
  // Efficiencies of datasheet peaks: nothing runs faster than the peak, so (0, 1].
  check(c.gemm_measured,
        calibration::efficiency_fit_problem("gemm_bf16", "max_efficiency", c.gemm_fit.fit.max_efficiency,
                                            c.gemm_fit.fit.residual, kMaxProfileFitRms));
  check(c.fp8_measured,
        calibration::efficiency_fit_problem("gemm_fp8", "fp8_max_efficiency", c.fp8_fit.fp8_max_efficiency,
                                            c.fp8_fit.residual, kMaxProfileFitRms));
  // Not its residual: one overhead shared by kernels whose floors differ (copy records no
  // autograd node) leaves the 64-element samples tens of percent off, as on the CPU, whose
  // profile does not refuse it either.
  check(c.memory_measured,
        calibration::efficiency_fit_problem("memory", "hbm_efficiency", c.hbm_efficiency, c.memory_fit.residual,
                                            std::numeric_limits<double>::infinity()));
  // The key is the head-dim curve's value at head_dim 128 (op_cost.cpp): what must lie in
  // (0, 1] is the efficiency it implies at the head dims measured.
  double scale = 0;
  for (const auto& a : c.attention)
    if (a.kernel == "qk" || a.kernel == "av")
      scale = std::max(scale, calibration::score_bmm_head_dim_scale(a.head_dim));
  check(c.score_bmm_measured,
        calibration::efficiency_fit_problem("attention", "score_bmm_efficiency x head-dim scale",
                                            c.score_bmm_fit.score_bmm_efficiency * (scale > 0 ? scale : 1.0),
                                            c.score_bmm_fit.residual, kMaxProfileFitRms));
  check(c.profile_flash_measured(),
        calibration::efficiency_fit_problem("flash_attention", "flash_efficiency",
                                            c.profile_flash_fit().flash_efficiency, c.profile_flash_fit().residual,
                                            kMaxProfileFitRms));
  return out;
}

InstanceType measured_gpu_instance_type(const GpuCalibration& c, const std::string& name) {
  InstanceType it = c.base;
  it.name = name;
  it.price = {};  // a lent machine: the datasheet file has no price to keep
  GpuProfile& g = it.gpu;
  if (!c.gpu.name.empty()) g.name = c.gpu.name;
  if (c.gpu.memory_bytes > 0) g.hbm_bytes = c.gpu.memory_bytes;
  if (c.gpu.sm_count > 0) g.gemm.sm_count = c.gpu.sm_count;
  if (c.memory_measured) {
    // Back-to-back eager calls with autograd recording: their shared intercept is the
    // host's dispatch of one kernel (the device's own gap between queued kernels stays the
    // datasheet's kernel_overhead). The classes' rates are their kernels' measured ones.
    g.hbm_efficiency = c.hbm_efficiency;
    calibration::apply_memory_measurements(g, c.memory_fit.kernel_overhead, c.memory_fit.bandwidth);
  }
  if (c.gemm_measured) {
    g.gemm.max_efficiency = c.gemm_fit.fit.max_efficiency;
    g.gemm.k_half = c.gemm_fit.fit.k_half;
    g.gemm.tile = c.gemm_fit.tile;
    g.gemm.sm_count = c.gemm_fit.sm_count;
  }
  if (c.fp8_measured) g.gemm.fp8_max_efficiency = c.fp8_fit.fp8_max_efficiency;
  // Up to 2 (the loader's bound): the head-dim curve's key, capped in use by max_efficiency.
  if (c.score_bmm_measured)
    g.attention.score_bmm_efficiency = std::clamp(c.score_bmm_fit.score_bmm_efficiency, 1e-4, 2.0);
  if (c.profile_flash_measured()) {
    calibration::apply_flash_fit(g,
                                 c.gpu.attention_kernel == "sdpa" ? calibration::sdpa_kernel(c.gpu.compute_major)
                                                                  : AttentionKernel::partune,
                                 c.profile_flash_fit());
    g.attention.flash_fp32 = false;  // both CUDA kernels take bf16 / fp16
  }
  // Offload copies both ways: the slower direction bounds it.
  if (c.host_to_device_bw > 0 && c.device_to_host_bw > 0)
    it.pcie_bw = std::min(c.host_to_device_bw, c.device_to_host_bw);
  if (c.gpu.host_cores > 0) it.host_cores = c.gpu.host_cores;
  if (c.gpu.host_memory_bytes > 0) it.host_memory_bytes = c.gpu.host_memory_bytes;
  return it;
}

namespace {

using detail::quoted;
using detail::residual_map;
using detail::residual_text;

std::string profile_header(const GpuCalibration& c, const std::string& command_line) {
  const GpuInfo& g = c.gpu;
  const std::string when =
      c.records > 0 ? fmt::format("from the measurements of {} recorded run{} (their calibrate.json, pooled)", c.records,
                                  c.records > 1 ? "s" : "")
                    : "on " + g.date;
  return fmt::format(
      "Measured profile of one {} (CUDA device 0), written by `{}` {}.\n"
      "Host {}: {} cores, {:.1f} GiB RAM; CUDA driver {}.{}; LibTorch {}. The GPU: compute capability {}.{},\n"
      "{} multiprocessors, {:.0f} MiB of L2, {:.1f} GiB of memory. Calibration took {:.0f} s{}.\n"
      "It starts from {}.yaml, the datasheet file (peaks, links, host, reserved memory: what nothing\n"
      "here measures, with its sources there). Each measured value names the measurements it was\n"
      "fitted to (least squares on the relative time error, the estimator's own formula, against the\n"
      "datasheet peak) and the fit's residual; the raw measurements and every fit are under\n"
      "`calibration:` (not read by the loader). Times: torch::cuda::synchronize() around each batch of\n"
      "calls, the 20th percentile of 5 batches after a warm-up.",
      g.name, command_line, when, g.host, g.host_cores, g.host_memory_bytes / GiB, g.driver_version / 1000,
      g.driver_version % 1000 / 10, g.libtorch, g.compute_major, g.compute_minor, g.sm_count, g.l2_bytes / MiB,
      g.memory_bytes / GiB, c.seconds,
      c.quick ? " (--quick: fewer shapes, short timings; rerun without it for a profile to keep)" : "", c.base_name);
}

// Where each attention value comes from (add_gpu_comments' share for gpu.attention).
void add_attention_comments(const GpuCalibration& c, std::map<std::string, std::string>& k) {
  const std::string sheet = fmt::format("[{}] the datasheet value", c.base_name);
  const std::string kept = sheet + ": not measured (calibration.notes say why)";
  const auto either = [&](bool measured, const std::string& text) { return measured ? text : kept; };
  const bool sdpa = c.gpu.attention_kernel == "sdpa";
  const std::string partune_kernel = "partune's CUDA FlashAttention (kernels/flash_attention.hpp: scalar fp32 on\n"
                                     "shared-memory tiles, no tensor cores)";
  const std::string other =
      sdpa ? (c.flash_measured ? fmt::format(". {} on the same shapes: {:.4f}", partune_kernel, c.flash_fit.flash_efficiency)
                               : std::string())
           : (c.sdpa_measured ? fmt::format(". LibTorch's scaled_dot_product_attention on the same shapes: {:.3f}",
                                            c.sdpa_fit.flash_efficiency)
                              : std::string());
  k["gpu.attention.flash_efficiency"] = either(
      c.profile_flash_measured(),
      fmt::format("fitted: {} (what flash_attention: true runs here), causal, bf16, forward + backward,\n"
                  "t = 1.75 F / (peak eff) + 2 overhead, eff along hardware.hpp's FlashCurve; {}{}",
                  sdpa ? "LibTorch's fused scaled_dot_product_attention" : partune_kernel,
                  residual_text(c.profile_flash_fit().residual), other));
  k["gpu.attention.flash_seq_half"] =
      either(c.profile_flash_measured(), "fitted with flash_efficiency (0: the samples' one sequence length)");
  k["gpu.attention.kernel"] =
      either(c.profile_flash_measured(), sdpa ? "LibTorch's SDPA runs cuDNN's fused attention on sm90 and later, "
                                                "FlashAttention-2 before (calibration::sdpa_kernel)"
                                              : "partune's own kernel");
  k["gpu.attention.score_bmm_efficiency"] =
      either(c.score_bmm_measured,
             fmt::format("fitted: torch::bmm bf16 Q K^T and A V over (batch x heads, seq, head_dim) under\n"
                         "calibration:; the estimator scales this key by (d/(d+64))/(128/192); {}",
                         residual_text(c.score_bmm_fit.residual)));
  k["gpu.attention.score_bytes_fwd"] = k["gpu.attention.score_bytes_bwd"] = sheet;
  k["gpu.attention.flash_head_dim_half"] = sheet + " (every sample at one head dim)";
  k["gpu.attention.kernels"] = sheet + "s (the other kernels' cited curves)";
}

// Where each GPU value comes from: measured, or the datasheet file's.
void add_gpu_comments(const GpuCalibration& c, std::map<std::string, std::string>& k) {
  const std::string sheet = fmt::format("[{}] the datasheet value", c.base_name);
  const std::string kept = sheet + ": not measured (calibration.notes say why)";
  const auto either = [&](bool measured, const std::string& text) { return measured ? text : kept; };
  k["gpus_per_node"] = sheet + ": one GPU, one rank";
  k["gpu.name"] = "measured: cuDeviceGetName";
  for (const char* p : {"fp32", "tf32", "fp16", "fp8"}) k[std::string("gpu.peak_tflops.") + p] = sheet;
  k["gpu.peak_tflops.bf16"] = sheet + " (dense): the GEMM, attention and HBM efficiencies are of the peaks";
  k["gpu.hbm_GiB"] = "measured: cuDeviceTotalMem";
  k["gpu.hbm_bw_GBps"] = sheet + ": hbm_efficiency is of it";
  k["gpu.reserved_GiB"] = sheet;
  const auto& mf = c.memory_fit;
  const auto bw = [&](const char* kernel) {
    try {
      return mf.bandwidth_of(kernel) / 1e9;
    } catch (const std::out_of_range&) {
      return 0.0;
    }
  };
  k["gpu.hbm_efficiency"] =
      either(c.memory_measured,
             fmt::format("fitted: bf16 add {:.0f}, gelu {:.0f}, layer_norm {:.0f} GB/s (copy {:.0f}, read + write),\n"
                         "weighted by the estimator's per-token bytes (LayerNorm 8h, GeLU 16h, adds 14h) / hbm_bw",
                         bw("add"), bw("gelu"), bw("layer_norm"), bw("copy")));
  k["gpu.dispatch_us"] =
      either(c.memory_measured,
             fmt::format("fitted: the shared intercept of t = dispatch + bytes / bw_kernel over back-to-back calls of\n"
                         "64 elements and of >= 256 MiB (autograd recording, as in training): the host's launch of a kernel; {}",
                         residual_text(mf.residual)));
  k["gpu.kernel_overhead_us"] = sheet + ": the device's gap between queued kernels (calibrate's intercept is the "
                                         "host's dispatch, below)";
  k["gpu.transpose_efficiency"] = sheet + ": not measured by calibrate";
  k["gpu.norm_efficiency"] = either(c.memory_measured, fmt::format("measured: layer_norm {:.0f} GB/s / hbm_bw", bw("layer_norm")));
  k["gpu.copy_efficiency"] = either(c.memory_measured, fmt::format("measured: copy {:.0f} GB/s / hbm_bw", bw("copy")));
  k["gpu.strided_efficiency"] =
      either(c.memory_measured && bw("broadcast_mul") > 0,
             fmt::format("measured: a [rows, 4096] x [rows, 1] multiply (LibTorch's non-vectorised kernel) {:.0f} GB/s / hbm_bw",
                         bw("broadcast_mul")));
  k["gpu.gemm.max_efficiency"] =
      either(c.gemm_measured,
             fmt::format("fitted: torch::matmul bf16, {} shapes (squares, a layer's GEMMs, short k), the cost\n"
                         "model's rule (tile and wave quantisation, k / (k + k_half)) against the bf16 peak; {}",
                         c.gemm_fit.fit.residual.samples, residual_text(c.gemm_fit.fit.residual)));
  std::string tiles;
  for (const auto& [tile, rms] : c.gemm_fit.rms_by_tile) tiles += fmt::format(" {:.0f}: {:.1f}%", tile, 100 * rms);
  k["gpu.gemm.tile"] = either(c.gemm_measured, "fitted: the candidate with the smallest rms error (" + tiles + " )");
  k["gpu.gemm.sm_count"] = "measured: cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)";
  k["gpu.gemm.k_half"] = either(c.gemm_measured, "fitted with max_efficiency");
  k["gpu.gemm.fp8_max_efficiency"] =
      either(c.fp8_measured,
             fmt::format("fitted: at::_scaled_mm e4m3 x e4m3 -> bf16, per-tensor scales, no fast accumulation,\n"
                         "the bf16 fit's tile and k_half, against the fp8 peak; {}",
                         residual_text(c.fp8_fit.residual)));
  add_attention_comments(c, k);
}

// Where each link, host and collective value comes from.
void add_link_comments(const GpuCalibration& c, std::map<std::string, std::string>& k) {
  const std::string sheet = fmt::format("[{}] the datasheet value", c.base_name);
  for (const char* key : {"intra_node.fabric", "intra_node.bw_GBps", "intra_node.latency_us", "intra_node.efficiency",
                          "network.nics_per_node", "network.nic_bw_Gbps", "network.latency_us", "network.efficiency"})
    k[key] = sheet + " (one GPU: nothing crosses it)";
  const bool copies = c.host_to_device_bw > 0 && c.device_to_host_bw > 0;
  k["pcie.bw_GBps"] = copies ? fmt::format(
                                   "measured: pinned copies of {:.0f} MiB, host to device {:.1f}, device to host "
                                   "{:.1f} GB/s;\nthe slower (offload copies both ways)",
                                   c.copies.front().bytes / MiB, c.host_to_device_bw / 1e9, c.device_to_host_bw / 1e9)
                             : sheet + ": not measured";
  k["pcie.gpus_per_switch"] = sheet;
  k["host.cores"] = "measured: sched_getaffinity";
  k["host.memory_GiB"] = c.gpu.host_memory_bytes > 0 ? "measured: /proc/meminfo MemTotal" : sheet + ": not recorded";
  for (const char* key : {"collectives.ring.net_efficiency", "collectives.ring.compute_overlap",
                          "collectives.tree.net_efficiency", "collectives.tree.compute_overlap",
                          "collectives.all_to_all.net_efficiency", "collectives.all_to_all.compute_overlap"})
    k[key] = sheet + " (one GPU: no collectives)";
}

// calibration.fits: every fitted model, with `measured: false` where there was none.
void write_fits(std::ostringstream& y, const GpuCalibration& c) {
  const GpuProfile& sheet = c.base.gpu;
  y << "  fits:\n";
  if (c.gemm_measured) {
    y << fmt::format(
        "    gemm_bf16: {{max_efficiency: {:.4f}, k_half: {:.1f}, tile: {:.0f}, sm_count: {:.0f}, peak_TFLOPs: {:g}, "
        "{}, "
        "rms_by_tile: {{",
        c.gemm_fit.fit.max_efficiency, c.gemm_fit.fit.k_half, c.gemm_fit.tile, c.gemm_fit.sm_count,
        sheet.peak_flops_bf16 / 1e12, residual_map(c.gemm_fit.fit.residual));
    for (std::size_t i = 0; i < c.gemm_fit.rms_by_tile.size(); ++i)
      y << fmt::format("{}{:.0f}: {:.4f}", i ? ", " : "", c.gemm_fit.rms_by_tile[i].first,
                       c.gemm_fit.rms_by_tile[i].second);
    y << "}}\n";
  } else {
    y << "    gemm_bf16: {measured: false}\n";
  }
  if (c.fp8_measured)
    y << fmt::format("    gemm_fp8: {{fp8_max_efficiency: {:.4f}, peak_TFLOPs: {:g}, {}}}\n",
                     c.fp8_fit.fp8_max_efficiency, sheet.peak_flops_fp8 / 1e12, residual_map(c.fp8_fit.residual));
  else
    y << "    gemm_fp8: {measured: false}\n";
  if (c.memory_measured) {
    y << fmt::format(
        "    memory: {{kernel_overhead_us: {:.3f}, hbm_efficiency: {:.4f}, hbm_bw_GBps: {:g}, {}, bandwidth_GBps: {{",
        c.memory_fit.kernel_overhead * 1e6, c.hbm_efficiency, sheet.hbm_bw / 1e9, residual_map(c.memory_fit.residual));
    for (std::size_t i = 0; i < c.memory_fit.bandwidth.size(); ++i)
      y << fmt::format("{}{}: {:.1f}", i ? ", " : "", c.memory_fit.bandwidth[i].first,
                       c.memory_fit.bandwidth[i].second / 1e9);
    y << "}}\n";
  } else {
    y << "    memory: {measured: false}\n";
  }
  const auto efficiency_fit = [&](const char* key, bool measured, const char* name, double value,
                                  const calibration::Residual& r) {
    if (measured)
      y << fmt::format("    {}: {{{}: {:.4f}, {}}}\n", key, name, value, residual_map(r));
    else
      y << fmt::format("    {}: {{measured: false}}\n", key);
  };
  efficiency_fit("score_bmm", c.score_bmm_measured, "score_bmm_efficiency", c.score_bmm_fit.score_bmm_efficiency,
                 c.score_bmm_fit.residual);
  efficiency_fit("flash_attention", c.flash_measured, "flash_efficiency", c.flash_fit.flash_efficiency,
                 c.flash_fit.residual);
  efficiency_fit("sdpa", c.sdpa_measured, "flash_efficiency", c.sdpa_fit.flash_efficiency, c.sdpa_fit.residual);
  y << fmt::format("    pcie: {{host_to_device_GBps: {:.2f}, device_to_host_GBps: {:.2f}}}\n",
                   c.host_to_device_bw / 1e9, c.device_to_host_bw / 1e9);
}

// Provenance, fits and notes: the start of the `calibration:` mapping.
void write_provenance(std::ostringstream& y, const GpuCalibration& c, const std::string& command_line) {
  const GpuInfo& g = c.gpu;
  y << "calibration:\n";
  y << "  device: cuda\n";
  y << "  date: " << quoted(g.date) << "\n";
  y << "  host: " << quoted(g.host) << "\n";
  y << "  gpu: " << quoted(g.name) << "\n";
  y << fmt::format("  compute_capability: \"{}.{}\"\n", g.compute_major, g.compute_minor);
  y << fmt::format("  sm_count: {}\n", g.sm_count);
  y << fmt::format("  l2_MiB: {:.1f}\n", g.l2_bytes / MiB);
  y << fmt::format("  memory_GiB: {:.2f}\n", g.memory_bytes / GiB);
  y << fmt::format("  cuda_driver: \"{}.{}\"\n", g.driver_version / 1000, g.driver_version % 1000 / 10);
  y << "  libtorch: " << quoted(g.libtorch) << "\n";
  y << "  partune_cuda_attention: " << (g.partune_cuda_attention ? "true" : "false") << "\n";
  y << fmt::format("  host_cores: {}\n", g.host_cores);
  y << fmt::format("  host_memory_GiB: {:.2f}\n", g.host_memory_bytes / GiB);
  y << "  datasheet: " << quoted(c.base_name) << "\n";
  y << "  command: " << quoted(command_line) << "\n";
  y << "  quick: " << (c.quick ? "true" : "false") << "\n";
  y << fmt::format("  seconds: {:.1f}\n", c.seconds);
  write_fits(y, c);
  detail::write_notes(y, c.notes);
}

// The raw measurements, under calibration.measurements.
void write_measurements(std::ostringstream& y, const GpuCalibration& c) {
  y << "  measurements:                   # seconds: 20th percentile of 5 batches; min, max: fastest and slowest "
       "batch\n";
  y << "    gemm:                         # [dtype, m, n, k, seconds, min, max, TFLOP/s, shape]\n";
  for (const auto& g : c.gemm)
    y << fmt::format("      - [{}, {:.0f}, {:.0f}, {:.0f}, {:.4e}, {:.4e}, {:.4e}, {:.1f}, {}]\n", g.dtype, g.m, g.n,
                     g.k, g.time.seconds, g.time.min_seconds, g.time.max_seconds,
                     2 * g.m * g.n * g.k / g.time.seconds / 1e12, quoted(g.shape));
  y << "    memory:                       # [kernel, elements, bytes, seconds, min, max, GB/s], bf16\n";
  for (const auto& m : c.memory)
    y << fmt::format("      - [{}, {:.0f}, {:.0f}, {:.4e}, {:.4e}, {:.4e}, {:.1f}]\n", m.kernel, m.elements, m.bytes,
                     m.time.seconds, m.time.min_seconds, m.time.max_seconds, m.bytes / m.time.seconds / 1e9);
  y << "    attention:                    # [kernel, batch x heads, seq, head_dim, seconds, min, max, TFLOP/s], bf16;\n"
       "                                  # qk/av: 2 b s^2 d; flash/sdpa (causal, fwd+bwd): 1.75 x 4 b s^2 d\n";
  for (const auto& a : c.attention) {
    const bool bmm = a.kernel == "qk" || a.kernel == "av";
    const double flops = (bmm ? 2.0 : 7.0) * a.batch_heads * a.seq * a.seq * a.head_dim;
    y << fmt::format("      - [{}, {:.0f}, {:.0f}, {:.0f}, {:.4e}, {:.4e}, {:.4e}, {:.1f}]\n", a.kernel, a.batch_heads,
                     a.seq, a.head_dim, a.time.seconds, a.time.min_seconds, a.time.max_seconds,
                     flops / a.time.seconds / 1e12);
  }
  y << "    copies:                       # [direction, bytes, seconds, min, max, GB/s], pinned host memory\n";
  for (const auto& t : c.copies)
    y << fmt::format("      - [{}, {:.0f}, {:.4e}, {:.4e}, {:.4e}, {:.2f}]\n", t.direction, t.bytes, t.time.seconds,
                     t.time.min_seconds, t.time.max_seconds, t.bytes / t.time.seconds / 1e9);
}

}  // namespace

std::string gpu_instance_type_yaml(const GpuCalibration& c, const std::string& name, const std::string& command_line) {
  YamlComments comments;
  comments.header = profile_header(c, command_line);
  add_gpu_comments(c, comments.keys);
  add_link_comments(c, comments.keys);
  std::ostringstream y;
  y << partune::instance_type_yaml(measured_gpu_instance_type(c, name), comments);
  write_provenance(y, c, command_line);
  write_measurements(y, c);
  return y.str();
}

}  // namespace partune::kernels
