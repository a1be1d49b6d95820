// partune calibrate --out FILE [--device cpu|cuda] [--quick] [--threads N] [--json]
// partune calibrate --out FILE --records CALIBRATE.json... [--json]
// Measures this machine through the backend's libraries (kernels/calibrate.hpp; with
// --device cuda its GPU, kernels/gpu_calibrate.hpp), fits the cost model's parameters and
// writes them as an instance-type file that jobs can name (`instance_type: <file name
// without .yaml>` when it lies in scenarios/clusters/, or its path). --records fits the
// GPU measurements of recorded runs instead (their calibrate.json, several runs of one GPU
// pooled) by today's rules, with no GPU. Runs in
// build/partune-run: it needs LibTorch.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "calibrate_output.hpp"
#include "calibrate_report.hpp"
#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/backend/layer_timing.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/kernels/calibrate.hpp"
#include "partune/kernels/gpu_calibrate.hpp"
#include "progress.hpp"

namespace partune::cli {

namespace {

namespace fs = std::filesystem;

struct Options {
  std::string out, device = "cpu";
  std::vector<std::string> records;
  bool quick = false, json = false;
  int threads = 0;
};

void calibrate_cpu(const Options& opt, const std::string& command) {
  const std::unique_ptr<AtomicFile> output = open_output(opt.out);
  kernels::CalibrationOptions options;
  options.quick = opt.quick;
  options.max_threads = opt.threads;
  kernels::Calibration c = with_progress([&](const auto& progress) {
    options.progress = progress;
    return kernels::calibrate(options);
  });
  c.layer = backend::time_layer(c.layer);  // the backend's layer: its fixed cost per micro-batch
  const std::string yaml = kernels::instance_type_yaml(c, fs::path(opt.out).stem().string(), command);
  const InstanceType it = write_profile(*output, opt.out, yaml, kernels::unusable_fits(c));
  if (opt.json) std::cout << calibration_json(c, it, opt.out).dump(2) << "\n";
  else std::cout << calibration_text(c, it, opt.out);
}

// GPU 0 against its datasheet file; refused (exit 2) before anything is written when there
// is no GPU or no datasheet file for it.
void calibrate_cuda(const Options& opt, const std::string& command) {
  if (const std::string why = kernels::cuda_unavailable_reason(); !why.empty()) fail_calibration(why, 2);
  if (opt.threads > 0) fail_calibration("calibrate --device cuda: --threads applies to --device cpu", 2);
  const kernels::GpuInfo gpu = kernels::gpu_info();
  const std::string base = kernels::datasheet_instance_type_for(gpu.name);
  if (base.empty())
    fail_calibration(fmt::format("calibrate --device cuda: no datasheet instance type for '{}' (there are h100-sxm-device and "
                     "h200-device in scenarios/clusters/)", gpu.name), 2);
  const std::unique_ptr<AtomicFile> output = open_output(opt.out);
  kernels::GpuCalibrationOptions options;
  options.quick = opt.quick;
  const kernels::GpuCalibration c = with_progress([&](const auto& progress) {
    options.progress = progress;
    return kernels::calibrate_gpu(options, gpu, base);
  });
  const std::string yaml = kernels::gpu_instance_type_yaml(c, fs::path(opt.out).stem().string(), command);
  const InstanceType it = write_profile(*output, opt.out, yaml, kernels::unusable_gpu_fits(c));
  if (opt.json) std::cout << gpu_calibration_json(c, it, opt.out).dump(2) << "\n";
  else std::cout << gpu_calibration_text(c, it, opt.out);
}

}  // namespace

void register_calibrate(CLI::App& app) {
  auto* cmd = app.add_subcommand("calibrate",
                                 "Measure this machine (LibTorch kernels, Gloo, libfabric; or its GPU) and write a "
                                 "fitted instance-type file");
  auto opt = std::make_shared<Options>();
  cmd->add_option("--out", opt->out, "instance-type file to write, e.g. scenarios/clusters/local-measured.yaml")
      ->required();
  cmd->add_option("--device", opt->device,
                  "cpu: each core a rank (LibTorch, Gloo, libfabric); cuda: GPU 0, against its datasheet file")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--quick", opt->quick, "fewer shapes and sizes, short timings (under a minute on 2 cores or one H100)");
  cmd->add_option("--threads", opt->threads, "largest LibTorch thread count to measure matmul at (default: the cores)")
      ->check(count_in(1, 1024));
  cmd->add_flag("--json", opt->json, "print one JSON object with the measured figures and fitted values");
  cmd->add_option("--records", opt->records,
                  "fit recorded GPU runs' measurements instead of measuring (their calibrate.json, e.g. "
                  "docs/device-runs/*/calibrate.json; several runs of one GPU are pooled)")
      ->check(CLI::ExistingFile);
  cmd->callback([opt] {
    std::string command = "partune calibrate --out " + opt->out;
    if (opt->device != "cpu") command += " --device " + opt->device;
    if (opt->quick) command += " --quick";
    if (opt->threads > 0) command += fmt::format(" --threads {}", opt->threads);
    if (!opt->records.empty()) {
      if (opt->quick || opt->threads > 0 || opt->device != "cpu")
        fail_calibration("calibrate --records: fits recorded measurements; --device, --quick and --threads measure", 2);
      for (const std::string& r : opt->records) command += " --records " + r;
      return calibrate_records(opt->records, opt->out, opt->json, command);
    }
    if (opt->device == "cuda") calibrate_cuda(*opt, command);
    else calibrate_cpu(*opt, command);
  });
}

}  // namespace partune::cli
