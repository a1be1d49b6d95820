// The files and the terminal of `partune calibrate` (calibrate_output.hpp).
#include "calibrate_output.hpp"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "calibrate_report.hpp"
#include "commands.hpp"
#include "partune/kernels/gpu_calibrate.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

namespace partune::cli {

namespace fs = std::filesystem;

[[noreturn]] void fail_calibration(const std::string& message, int code) {
  std::fprintf(stderr, "partune: error: %s\n", message.c_str());
  throw Exit{code};
}

std::unique_ptr<AtomicFile> open_output(const std::string& path) {
  const fs::path p(path);
  if (p.filename().empty() || p.extension() != ".yaml")
    fail_calibration(fmt::format("--out {}: expected a file name ending in .yaml (its stem becomes the instance type's name)", path), 2);
  try {
    return std::make_unique<AtomicFile>(path);
  } catch (const OutputError& e) {
    fail_calibration(fmt::format("--out {}", e.what()), 2);
  }
}

InstanceType write_profile(AtomicFile& output, const std::string& out, const std::string& yaml,
                           const std::vector<std::string>& unusable) {
  if (!unusable.empty()) {
    const std::string raw = out + ".rejected";
    write_file_atomically(raw, yaml);
    fail_calibration(fmt::format("{} not written: {} (the measurements and fits are in {})", out, fmt::join(unusable, "; "), raw), 1);
  }
  output.write(yaml);
  output.close();
  const InstanceType it = load_instance_type(output.temp_path());
  output.commit();
  return it;
}

// The recorded runs' measurements fitted again (nothing measured here); refused (exit 2)
// before anything is written when a record does not read.
void calibrate_records(const std::vector<std::string>& records, const std::string& out, bool json,
                       const std::string& command) {
  kernels::GpuCalibration c;
  try {
    c = kernels::gpu_calibration_from_records(records);
  } catch (const std::exception& e) {
    fail_calibration(std::string("calibrate --records: ") + e.what(), 2);
  }
  const std::unique_ptr<AtomicFile> output = open_output(out);
  kernels::fit_gpu_calibration(c);
  const std::string yaml = kernels::gpu_instance_type_yaml(c, fs::path(out).stem().string(), command);
  const InstanceType it = write_profile(*output, out, yaml, kernels::unusable_gpu_fits(c));
  if (json) std::cout << gpu_calibration_json(c, it, out).dump(2) << "\n";
  else std::cout << gpu_calibration_text(c, it, out);
}

}  // namespace partune::cli
