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
  o << fmt::format("wrote {} (instance type '{}') in {:.0f} s{}\n", out, name, c.seconds,
                   c.quick ? ", --quick" : "");
  o << fmt::format("  host {}: {}, {} cores; LibTorch {}, libfabric {}\n", c.machine.host, c.machine.cpu_model,
                   c.machine.cores, c.machine.libtorch, c.machine.libfabric);
  o << fmt::format("  fp32 peak {:.1f} GFLOP/s per core ({})\n", c.fma_peak_flops / 1e9, c.fma_isa);
  o << fmt::format("  gemm: max_efficiency {:.3f}, k_half {:.1f}  (rms error {:.1f}%)\n",
                   it.gpu.gemm.max_efficiency, it.gpu.gemm.k_half, 100 * c.gemm_fit.residual.rms_relative);
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
                   it.intra_node.bw / 1e9, it.intra_node.latency * 1e6,
                   100 * c.transfer("all").residual.rms_relative, it.nic.bw / 1e9, it.nic.latency * 1e6);
  if (c.fabric.ok)
    o << fmt::format("  libfabric {} ({}): {:.1f} us one way at 8 B\n", c.fabric.provider, c.fabric.endpoint_type,
                     c.fabric.pingpong.front().seconds * 1e6);
  else
    o << fmt::format("  libfabric: not measured ({})\n", c.fabric.note);
  return o.str();
}

}  // namespace partune::cli
