// partune calibrate --out FILE [--quick] [--threads N] [--json]
// Measures this machine through the backend's libraries (kernels/calibrate.hpp), fits the
// cost model's parameters and writes them as an instance-type file that jobs can name
// (`instance_type: <file name without .yaml>` when it lies in scenarios/clusters/, or its
// path). Runs in build/partune-run: it needs LibTorch.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "calibrate_report.hpp"
#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
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
// created before any benchmark runs: a bad path fails at once (exit 2).
std::unique_ptr<AtomicFile> open_output(const std::string& path) {
  const fs::path p(path);
  if (p.filename().empty() || p.extension() != ".yaml")
    fail(fmt::format("--out {}: expected a file name ending in .yaml (its stem becomes the instance type's name)", path), 2);
  try {
    return std::make_unique<AtomicFile>(path);
  } catch (const OutputError& e) {
    fail(fmt::format("--out {}", e.what()), 2);
  }
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
      ->check(count_in(1, 1024));
  cmd->add_flag("--json", opt->json, "print one JSON object with the fitted values");
  cmd->callback([opt] {
    const std::unique_ptr<AtomicFile> output = open_output(opt->out);
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

    const std::string yaml = kernels::instance_type_yaml(c, name, command);
    // A fit that hit its bounds or explains its samples badly is refused: its measurements
    // are kept beside the target (not a .yaml: never taken for an instance type).
    if (const auto bad = kernels::unusable_fits(c); !bad.empty()) {
      const std::string raw = opt->out + ".rejected";
      write_file_atomically(raw, yaml);
      fail(fmt::format("{} not written: {} (the measurements and fits are in {})", opt->out, fmt::join(bad, "; "), raw), 1);
    }
    output->write(yaml);
    output->close();
    // The file must be one the loader accepts (strict keys, ranges) before it replaces anything.
    const InstanceType it = load_instance_type(output->temp_path());
    output->commit();

    if (opt->json) std::cout << calibration_json(c, it, opt->out).dump(2) << "\n";
    else std::cout << calibration_text(c, it, opt->out);
  });
}

}  // namespace partune::cli
