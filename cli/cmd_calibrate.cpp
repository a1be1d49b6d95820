// partune calibrate --out FILE [--quick] [--threads N] [--json]
// Measures this machine through the backend's libraries (kernels/calibrate.hpp), fits the
// cost model's parameters and writes them as an instance-type file that jobs can name
// (`instance_type: <file name without .yaml>` when it lies in scenarios/clusters/, or its
// path). Runs in build/partune-run: it needs LibTorch.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/kernels/calibrate.hpp"
#include "progress.hpp"

namespace partune::cli {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& message, int code) {
  std::fprintf(stderr, "partune: error: %s\n", message.c_str());
  throw Exit{code};
}

// The output is written to a temporary file beside it and renamed into place, so a failed
// or interrupted calibration never leaves a half-written profile. The temporary file is
// created before any benchmark runs: a bad path fails at once.
class AtomicOutput {
 public:
  explicit AtomicOutput(const std::string& path) : path_(path) {
    const fs::path p(path);
    if (p.filename().empty() || p.extension() != ".yaml")
      fail(fmt::format("--out {}: expected a file name ending in .yaml (its stem becomes the instance type's name)", path), 2);
    std::error_code ec;
    if (fs::is_directory(p, ec)) fail(fmt::format("--out {}: is a directory", path), 2);
    const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    if (!fs::is_directory(dir, ec)) fail(fmt::format("--out {}: directory '{}' does not exist", path, dir.string()), 2);
    std::string tmpl = (fs::absolute(dir) / ("." + p.filename().string() + ".tmp-XXXXXX")).string();
    fd_ = ::mkstemp(tmpl.data());
    if (fd_ < 0) fail(fmt::format("--out {}: cannot write in '{}': {}", path, dir.string(), std::strerror(errno)), 2);
    temp_ = tmpl;
  }
  ~AtomicOutput() {
    if (fd_ >= 0) ::close(fd_);
    if (!temp_.empty()) ::unlink(temp_.c_str());
  }
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  const std::string& temp_path() const { return temp_; }

  void write(const std::string& text) {
    std::size_t off = 0;
    while (off < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(fmt::format("--out {}: writing '{}': {}", path_, temp_, std::strerror(errno)), 1);
      }
      off += static_cast<std::size_t>(n);
    }
    // mkstemp makes it 0600; a profile is meant to be shared.
    if (::fchmod(fd_, 0644) != 0 || ::fsync(fd_) != 0 || ::close(fd_) != 0)
      fail(fmt::format("--out {}: writing '{}': {}", path_, temp_, std::strerror(errno)), 1);
    fd_ = -1;
  }
  void commit() {
    if (::rename(temp_.c_str(), path_.c_str()) != 0)
      fail(fmt::format("--out {}: cannot rename '{}' into place: {}", path_, temp_, std::strerror(errno)), 1);
    temp_.clear();
  }

 private:
  std::string path_, temp_;
  int fd_ = -1;
};

nlohmann::json summary(const kernels::Calibration& c, const InstanceType& it, const std::string& out) {
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

}  // namespace

void register_calibrate(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "calibrate", "Measure this machine (LibTorch kernels, Gloo, libfabric) and write a fitted instance-type file");
  struct Options {
    std::string out;
    bool quick = false, json = false;
    int threads = 0;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("--out", opt->out, "instance-type file to write, e.g. scenarios/clusters/local-measured.yaml")
      ->required();
  cmd->add_flag("--quick", opt->quick, "fewer shapes and sizes, short timings (under a minute on 2 cores)");
  cmd->add_option("--threads", opt->threads, "largest LibTorch thread count to measure matmul at (default: the cores)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", opt->json, "print one JSON object with the fitted values");
  cmd->callback([opt] {
    AtomicOutput output(opt->out);
    const std::string name = fs::path(opt->out).stem().string();
    std::string command = "partune calibrate --out " + opt->out;
    if (opt->quick) command += " --quick";
    if (opt->threads > 0) command += fmt::format(" --threads {}", opt->threads);

    kernels::CalibrationOptions options;
    options.quick = opt->quick;
    options.max_threads = opt->threads;
    const bool bar = ::isatty(STDERR_FILENO) != 0;  // silent when stderr is a file or a pipe
    if (bar) options.progress = [](int done, int total, const char* what) { progress_bar(done, total, what); };
    kernels::Calibration c;
    try {
      c = kernels::calibrate(options);
    } catch (...) {
      if (bar) std::fprintf(stderr, "\n");
      throw;
    }
    if (bar) std::fprintf(stderr, "\r\033[K");

    output.write(kernels::instance_type_yaml(c, name, command));
    // The file must be one the loader accepts (strict keys, ranges) before it replaces anything.
    const InstanceType it = load_instance_type(output.temp_path());
    output.commit();

    if (opt->json) {
      std::cout << summary(c, it, opt->out).dump(2) << "\n";
      return;
    }
    std::cout << fmt::format("wrote {} (instance type '{}') in {:.0f} s{}\n", opt->out, name, c.seconds,
                             c.quick ? ", --quick" : "");
    std::cout << fmt::format("  host {}: {}, {} cores; LibTorch {}, libfabric {}\n", c.machine.host, c.machine.cpu_model,
                             c.machine.cores, c.machine.libtorch, c.machine.libfabric);
    std::cout << fmt::format("  fp32 peak {:.1f} GFLOP/s per core ({})\n", c.fma_peak_flops / 1e9, c.fma_isa);
    std::cout << fmt::format("  gemm: max_efficiency {:.3f}, k_half {:.1f}  (rms error {:.1f}%)\n",
                             it.gpu.gemm.max_efficiency, it.gpu.gemm.k_half, 100 * c.gemm_fit.residual.rms_relative);
    std::cout << fmt::format("  memory: {:.2f} GB/s x {:.3f}, kernel overhead {:.2f} us  (rms error {:.1f}%)\n",
                             it.gpu.hbm_bw / 1e9, it.gpu.hbm_efficiency, it.gpu.kernel_overhead * 1e6,
                             100 * c.memory_fit.residual.rms_relative);
    std::cout << fmt::format("  attention: score_bmm_efficiency {:.3f}  (rms error {:.1f}%)\n",
                             it.gpu.attention.score_bmm_efficiency, 100 * c.attention_fit.residual.rms_relative);
    if (!c.all_busy.empty())
      std::cout << fmt::format("  every core busy: each keeps {:.0f}% of its speed alone (host.all_busy_speed)\n",
                               100 * it.host_all_busy_speed);
    std::cout << fmt::format("  Gloo: {:.2f} GB/s, {:.1f} us per step (rms error {:.1f}%); send/recv {:.2f} GB/s, {:.1f} us\n",
                             it.intra_node.bw / 1e9, it.intra_node.latency * 1e6,
                             100 * c.transfer("all").residual.rms_relative, it.nic.bw / 1e9, it.nic.latency * 1e6);
    if (c.fabric.ok)
      std::cout << fmt::format("  libfabric {} ({}): {:.1f} us one way at 8 B\n", c.fabric.provider, c.fabric.endpoint_type,
                               c.fabric.pingpong.front().seconds * 1e6);
    else
      std::cout << fmt::format("  libfabric: not measured ({})\n", c.fabric.note);
  });
}

}  // namespace partune::cli
