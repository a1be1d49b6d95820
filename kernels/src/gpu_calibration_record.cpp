// Recorded GPU calibrations (the calibrate.json that `partune calibrate --device cuda --json`
// prints, kept per run under docs/device-runs/) read back into GpuCalibration's
// measurements, several runs of one GPU pooled, for `calibrate --records` to fit again by
// today's rules. No LibTorch: plain JSON.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "partune/costmodel/scenario.hpp"
#include "partune/kernels/gpu_calibrate.hpp"

namespace partune::kernels {

namespace {

GpuTiming timing_of(const nlohmann::json& j) {
  const double s = j.at("seconds").get<double>();
  return {s, j.value("min_seconds", s), j.value("max_seconds", s)};
}

nlohmann::json read_record(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::invalid_argument(file + ": cannot be read");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(file + ": not JSON (" + e.what() + ")");
  }
}

// "9.0" as {9, 0}; `key` names the field in the error of anything else.
std::pair<int, int> major_minor(const std::string& text, const char* key) {
  const auto dot = text.find('.');
  try {
    std::size_t used = 0;
    const int major = std::stoi(text.substr(0, dot), &used);
    const int minor = dot == std::string::npos ? 0 : std::stoi(text.substr(dot + 1));
    if (used == (dot == std::string::npos ? text.size() : dot)) return {major, minor};
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(fmt::format("{}: '{}' is not MAJOR.MINOR", key, text));
}

// The GPU's facts as the record states them.
GpuInfo gpu_of(const nlohmann::json& j) {
  GpuInfo g;
  g.name = j.at("gpu").get<std::string>();
  g.host = j.value("host", std::string());
  g.sm_count = j.value("sm_count", 0);
  std::tie(g.compute_major, g.compute_minor) =
      major_minor(j.value("compute_capability", std::string("0.0")), "compute_capability");
  g.memory_bytes = j.value("memory_GiB", 0.0) * 1024.0 * 1024.0 * 1024.0;
  g.l2_bytes = j.value("l2_MiB", 0.0) * 1024.0 * 1024.0;
  g.libtorch = j.value("libtorch", std::string());
  g.attention_kernel = j.value("attention_kernel", std::string("partune"));
  g.host_cores = j.value("host_cores", 0);
  const auto [driver_major, driver_minor] = major_minor(j.value("cuda_driver", std::string("0.0")), "cuda_driver");
  g.driver_version = driver_major * 1000 + driver_minor * 10;  // "13.0": 13000
  g.partune_cuda_attention = j.value("flash_attention", nlohmann::json::object()).value("measured", false);
  return g;
}

void add_measurements(const nlohmann::json& m, bool gradients_accumulated, GpuCalibration& c) {
  for (const auto& g : m.value("gemm", nlohmann::json::array()))
    c.gemm.push_back({g.at("dtype").get<std::string>(), g.value("shape", std::string()), g.at("m").get<double>(),
                      g.at("n").get<double>(), g.at("k").get<double>(), timing_of(g)});
  for (const auto& x : m.value("memory", nlohmann::json::array()))
    c.memory.push_back({x.at("kernel").get<std::string>(), x.value("elements", 0.0), x.at("bytes").get<double>(),
                        timing_of(x)});
  for (const auto& a : m.value("attention", nlohmann::json::array())) {
    const std::string kernel = a.at("kernel").get<std::string>();
    c.attention.push_back({kernel, a.at("batch_heads").get<double>(), a.at("seq").get<double>(),
                           a.at("head_dim").get<double>(), timing_of(a),
                           gradients_accumulated && (kernel == "flash" || kernel == "sdpa")});
  }
  for (const auto& t : m.value("copies", nlohmann::json::array()))
    c.copies.push_back({t.at("direction").get<std::string>(), t.at("bytes").get<double>(), timing_of(t)});
}

}  // namespace

GpuCalibration gpu_calibration_from_records(const std::vector<std::string>& calibrate_json_files) {
  if (calibrate_json_files.empty()) throw std::invalid_argument("--records: no calibrate.json given");
  GpuCalibration c;
  for (const std::string& file : calibrate_json_files) {
    const nlohmann::json j = read_record(file);
    try {
      if (j.value("device", std::string()) != "cuda")
        throw std::invalid_argument("device: not a GPU calibration (calibrate --device cuda --json)");
      const GpuInfo g = gpu_of(j);
      const std::string datasheet = j.at("datasheet").get<std::string>();
      if (!c.base_name.empty() && (g.name != c.gpu.name || datasheet != c.base_name))
        throw std::invalid_argument(fmt::format("gpu: '{}' on datasheet {}, where the first record has '{}' on {}",
                                                g.name, datasheet, c.gpu.name, c.base_name));
      c.gpu = g;
      c.base_name = datasheet;
      c.quick = c.quick || j.value("quick", false);
      c.seconds += j.value("seconds", 0.0);
      ++c.records;
      // Records before the key accumulated the attention's gradients (gpu_calibrate.cpp).
      add_measurements(j.at("measurements"), !j.contains("attention_gradients"), c);
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(file + ": not a calibrate.json record (" + e.what() + ")");
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(file + ": " + e.what());
    }
  }
  c.base = load_instance_type(c.base_name);
  return c;
}

}  // namespace partune::kernels
