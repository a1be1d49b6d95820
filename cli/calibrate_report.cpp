#include "calibrate_report.hpp"

#include <fmt/format.h>

#include <sstream>

namespace partune::cli {

nlohmann::json calibration_json(const kernels::Calibration& c, const InstanceType& it, const std::string& out) {
  nlohmann::json j;
  j["out"] = out;
  j["name"] = it.name;
  j["quick"] = c.quick;
  j["seconds"] = c.seconds;
  j["host"] = c.machine.host;
  j["cpu_model"] = c.machine.cpu_model;
  j["cores"] = c.machine.cores;
  j["libtorch"] = c.machine.libtorch;
  j["libfabric"] = c.machine.libfabric;
  j["peak_tflops_fp32"] = it.gpu.peak_flops_fp32 / 1e12;
  j["gemm"] = {{"max_efficiency", it.gpu.gemm.max_efficiency},
               {"k_half", it.gpu.gemm.k_half},
               {"rms_relative_error", c.gemm_fit.residual.rms_relative}};
  j["hbm_bw_GBps"] = it.gpu.hbm_bw / 1e9;
  j["hbm_efficiency"] = it.gpu.hbm_efficiency;
  j["kernel_overhead_us"] = it.gpu.kernel_overhead * 1e6;
  j["memory_rms_relative_error"] = c.memory_fit.residual.rms_relative;
  j["score_bmm_efficiency"] = it.gpu.attention.score_bmm_efficiency;
  j["attention_rms_relative_error"] = c.attention_fit.residual.rms_relative;
  j["flash_efficiency"] = it.gpu.attention.flash_efficiency;
  j["flash_rms_relative_error"] = c.flash_fit.residual.rms_relative;
  j["intra_node"] = {{"bw_GBps", it.intra_node.bw / 1e9},
                     {"latency_us", it.intra_node.latency * 1e6},
                     {"rms_relative_error", c.transfer("all").residual.rms_relative}};
  j["network"] = {{"nic_bw_Gbps", it.nic.bw * 8 / 1e9},
                  {"latency_us", it.nic.latency * 1e6},
                  {"rms_relative_error", c.transfer("send_recv").residual.rms_relative}};
  j["ring_net_efficiency"] = it.ring.net_efficiency;
  j["all_busy_speed"] = it.host_all_busy_speed;
  j["libfabric_probe"] = {{"ok", c.fabric.ok}, {"provider", c.fabric.provider}, {"note", c.fabric.note}};
  nlohmann::json fits = nlohmann::json::array();
  for (const auto& f : c.transfer_fits)
    fits.push_back({{"kind", f.kind},
                    {"range", f.range},
                    {"latency_us", f.fit.latency * 1e6},
                    {"bandwidth_GBps", f.fit.bandwidth / 1e9},
                    {"rms_relative_error", f.fit.residual.rms_relative}});
  j["transfer_fits"] = fits;
  return j;
}

std::string calibration_text(const kernels::Calibration& c, const InstanceType& it, const std::string& out) {
  std::ostringstream o;
  const std::string& name = it.name;
  o << fmt::format("wrote {} (instance type '{}') in {:.0f} s{}\n", out, name, c.seconds, c.quick ? ", --quick" : "");
  o << fmt::format("  host {}: {}, {} cores; LibTorch {}, libfabric {}\n", c.machine.host, c.machine.cpu_model,
                   c.machine.cores, c.machine.libtorch, c.machine.libfabric);
  o << fmt::format("  fp32 peak {:.1f} GFLOP/s per core (from the {}; the {} FMA loop read {:.1f})\n",
                   c.fma_peak_flops / 1e9, c.peak_source, c.fma_isa, c.fma_loop_flops / 1e9);
  o << fmt::format("  gemm: max_efficiency {:.3f}, k_half {:.1f}  (rms error {:.1f}%)\n", it.gpu.gemm.max_efficiency,
                   it.gpu.gemm.k_half, 100 * c.gemm_fit.residual.rms_relative);
  o << fmt::format("  memory: {:.2f} GB/s x {:.3f}, kernel overhead {:.2f} us  (rms error {:.1f}%)\n",
                   it.gpu.hbm_bw / 1e9, it.gpu.hbm_efficiency, it.gpu.kernel_overhead * 1e6,
                   100 * c.memory_fit.residual.rms_relative);
  o << fmt::format("  attention: score_bmm_efficiency {:.3f}  (rms error {:.1f}%)\n",
                   it.gpu.attention.score_bmm_efficiency, 100 * c.attention_fit.residual.rms_relative);
  o << fmt::format("  flash attention: flash_efficiency {:.3f}  (rms error {:.1f}%)\n",
                   it.gpu.attention.flash_efficiency, 100 * c.flash_fit.residual.rms_relative);
  if (!c.all_busy.empty())
    o << fmt::format("  every core busy: each keeps {:.0f}% of its speed alone (host.all_busy_speed)\n",
                     100 * it.host_all_busy_speed);
  o << fmt::format("  Gloo: {:.2f} GB/s, {:.1f} us per step (rms error {:.1f}%); send/recv {:.2f} GB/s, {:.1f} us\n",
                   it.intra_node.bw / 1e9, it.intra_node.latency * 1e6, 100 * c.transfer("all").residual.rms_relative,
                   it.nic.bw / 1e9, it.nic.latency * 1e6);
  if (c.fabric.ok)
    o << fmt::format("  libfabric {} ({}): {:.1f} us one way at 8 B\n", c.fabric.provider, c.fabric.endpoint_type,
                     c.fabric.pingpong.front().seconds * 1e6);
  else
    o << fmt::format("  libfabric: not measured ({})\n", c.fabric.note);
  return o.str();
}

namespace {

nlohmann::json timing_json(const kernels::GpuTiming& t) {
  return {{"seconds", t.seconds}, {"min_seconds", t.min_seconds}, {"max_seconds", t.max_seconds}};
}

// calibration.measurements of the file, as JSON arrays of objects.
nlohmann::json gpu_measurements_json(const kernels::GpuCalibration& c) {
  nlohmann::json gemm = nlohmann::json::array(), memory = nlohmann::json::array(), attention = nlohmann::json::array(),
                 copies = nlohmann::json::array();
  for (const auto& g : c.gemm) {
    nlohmann::json j = {{"dtype", g.dtype}, {"shape", g.shape},
                        {"m", g.m},         {"n", g.n},
                        {"k", g.k},         {"tflops", 2 * g.m * g.n * g.k / g.time.seconds / 1e12}};
    j.update(timing_json(g.time));
    gemm.push_back(j);
  }
  for (const auto& m : c.memory) {
    nlohmann::json j = {
        {"kernel", m.kernel}, {"elements", m.elements}, {"bytes", m.bytes}, {"GBps", m.bytes / m.time.seconds / 1e9}};
    j.update(timing_json(m.time));
    memory.push_back(j);
  }
  for (const auto& a : c.attention) {
    nlohmann::json j = {{"kernel", a.kernel}, {"batch_heads", a.batch_heads}, {"seq", a.seq}, {"head_dim", a.head_dim}};
    j.update(timing_json(a.time));
    attention.push_back(j);
  }
  for (const auto& t : c.copies) {
    nlohmann::json j = {{"direction", t.direction}, {"bytes", t.bytes}, {"GBps", t.bytes / t.time.seconds / 1e9}};
    j.update(timing_json(t.time));
    copies.push_back(j);
  }
  return {{"gemm", gemm}, {"memory", memory}, {"attention", attention}, {"copies", copies}};
}

}  // namespace

nlohmann::json gpu_calibration_json(const kernels::GpuCalibration& c, const InstanceType& it, const std::string& out) {
  const kernels::GpuInfo& g = c.gpu;
  nlohmann::json j;
  j["out"] = out;
  j["name"] = it.name;
  j["device"] = "cuda";
  j["gpu"] = g.name;
  j["datasheet"] = c.base_name;
  j["quick"] = c.quick;
  j["seconds"] = c.seconds;
  j["host"] = g.host;
  j["host_cores"] = g.host_cores;
  j["libtorch"] = g.libtorch;
  j["cuda_driver"] = fmt::format("{}.{}", g.driver_version / 1000, g.driver_version % 1000 / 10);
  j["compute_capability"] = fmt::format("{}.{}", g.compute_major, g.compute_minor);
  j["sm_count"] = g.sm_count;
  j["l2_MiB"] = g.l2_bytes / (1024.0 * 1024.0);
  j["memory_GiB"] = it.gpu.hbm_bytes / (1024.0 * 1024.0 * 1024.0);
  j["peak_tflops"] = {{"bf16", it.gpu.peak_flops_bf16 / 1e12}, {"fp8", it.gpu.peak_flops_fp8 / 1e12}};
  nlohmann::json by_tile = nlohmann::json::object();
  for (const auto& [tile, rms] : c.gemm_fit.rms_by_tile) by_tile[fmt::format("{:.0f}", tile)] = rms;
  j["gemm"] = {{"measured", c.gemm_measured},
               {"max_efficiency", it.gpu.gemm.max_efficiency},
               {"k_half", it.gpu.gemm.k_half},
               {"tile", it.gpu.gemm.tile},
               {"sm_count", it.gpu.gemm.sm_count},
               {"rms_relative_error", c.gemm_fit.fit.residual.rms_relative},
               {"rms_by_tile", by_tile}};
  j["fp8"] = {{"measured", c.fp8_measured},
              {"fp8_max_efficiency", it.gpu.gemm.fp8_max_efficiency},
              {"rms_relative_error", c.fp8_fit.residual.rms_relative}};
  nlohmann::json bandwidths = nlohmann::json::object();
  for (const auto& [kernel, bw] : c.memory_fit.bandwidth) bandwidths[kernel] = bw / 1e9;
  j["memory"] = {{"measured", c.memory_measured},
                 {"hbm_bw_GBps", it.gpu.hbm_bw / 1e9},
                 {"hbm_efficiency", it.gpu.hbm_efficiency},
                 {"kernel_overhead_us", it.gpu.kernel_overhead * 1e6},
                 {"bandwidth_GBps", bandwidths},
                 {"rms_relative_error", c.memory_fit.residual.rms_relative}};
  j["score_bmm"] = {{"measured", c.score_bmm_measured},
                    {"score_bmm_efficiency", it.gpu.attention.score_bmm_efficiency},
                    {"rms_relative_error", c.score_bmm_fit.residual.rms_relative}};
  j["attention_kernel"] = c.gpu.attention_kernel;  // what flash_attention: true runs: its fit is the profile's
  // The timed calls return their gradients (calibration::without_gradient_accumulation
  // applies to the records without this key).
  j["attention_gradients"] = "returned";
  j["flash_attention"] = {{"measured", c.flash_measured},
                          {"flash_efficiency", c.flash_fit.flash_efficiency},
                          {"seq_half", c.flash_fit.seq_half},
                          {"rms_relative_error", c.flash_fit.residual.rms_relative}};
  j["sdpa"] = {{"measured", c.sdpa_measured},
               {"flash_efficiency", c.sdpa_fit.flash_efficiency},
               {"seq_half", c.sdpa_fit.seq_half},
               {"rms_relative_error", c.sdpa_fit.residual.rms_relative}};
  j["pcie"] = {{"host_to_device_GBps", c.host_to_device_bw / 1e9},
               {"device_to_host_GBps", c.device_to_host_bw / 1e9},
               {"bw_GBps", it.pcie_bw / 1e9}};
  j["notes"] = c.notes;
  j["measurements"] = gpu_measurements_json(c);
  return j;
}

std::string gpu_calibration_text(const kernels::GpuCalibration& c, const InstanceType& it, const std::string& out) {
  std::ostringstream o;
  const GpuProfile& g = it.gpu;
  const auto kept = [](bool measured) { return measured ? "" : "  [datasheet: not measured]"; };
  o << fmt::format("wrote {} (instance type '{}', from {}) in {:.0f} s{}\n", out, it.name, c.base_name, c.seconds,
                   c.quick ? ", --quick" : "");
  o << fmt::format("  {}: compute capability {}.{}, {} SMs, {:.1f} GiB; LibTorch {}\n", c.gpu.name, c.gpu.compute_major,
                   c.gpu.compute_minor, c.gpu.sm_count, g.hbm_bytes / (1024.0 * 1024.0 * 1024.0), c.gpu.libtorch);
  o << fmt::format(
      "  bf16 gemm: max_efficiency {:.3f}, k_half {:.0f}, tile {:.0f} of {:g} TFLOP/s  (rms error {:.1f}%){}\n",
      g.gemm.max_efficiency, g.gemm.k_half, g.gemm.tile, g.peak_flops_bf16 / 1e12,
      100 * c.gemm_fit.fit.residual.rms_relative, kept(c.gemm_measured));
  o << fmt::format("  fp8 gemm: fp8_max_efficiency {:.3f} of {:g} TFLOP/s  (rms error {:.1f}%){}\n",
                   g.gemm.fp8_max_efficiency, g.peak_flops_fp8 / 1e12, 100 * c.fp8_fit.residual.rms_relative,
                   kept(c.fp8_measured));
  o << fmt::format("  memory: {:g} GB/s x {:.3f}, kernel overhead {:.2f} us  (rms error {:.1f}%){}\n", g.hbm_bw / 1e9,
                   g.hbm_efficiency, g.kernel_overhead * 1e6, 100 * c.memory_fit.residual.rms_relative,
                   kept(c.memory_measured));
  o << fmt::format("  attention: score_bmm_efficiency {:.3f}  (rms error {:.1f}%){}\n",
                   g.attention.score_bmm_efficiency, 100 * c.score_bmm_fit.residual.rms_relative,
                   kept(c.score_bmm_measured));
  o << fmt::format("  flash attention ({}, what flash_attention: true runs): flash_efficiency {:.3f}, seq_half "
                   "{:.0f}  (rms error {:.1f}%){}\n",
                   c.gpu.attention_kernel == "sdpa" ? "LibTorch's fused attention" : "partune's CUDA kernel",
                   g.attention.flash_efficiency, g.attention.flash_seq_half,
                   100 * c.profile_flash_fit().residual.rms_relative,
                   kept(c.profile_flash_measured()));
  if (c.gpu.attention_kernel == "sdpa" && c.flash_measured)
    o << fmt::format("  partune's CUDA FlashAttention, same shapes: {:.4f} of peak  (not in the profile)\n",
                     c.flash_fit.flash_efficiency);
  else if (c.sdpa_measured)
    o << fmt::format("  LibTorch scaled_dot_product_attention, same shapes: {:.3f} of peak  (not in the profile)\n",
                     c.sdpa_fit.flash_efficiency);
  o << fmt::format("  pinned copies: host to device {:.1f}, device to host {:.1f} GB/s\n", c.host_to_device_bw / 1e9,
                   c.device_to_host_bw / 1e9);
  for (const auto& n : c.notes) o << "  note: " << n << "\n";
  return o.str();
}

}  // namespace partune::cli
