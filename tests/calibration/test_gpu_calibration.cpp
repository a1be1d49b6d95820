// `partune calibrate --device cuda` without a GPU: its fits on synthetic timings generated
// from the cost model's own rules with known parameters (they must come back), the
// profile it writes from them (the loader must read back the measured values, the
// datasheet's elsewhere), the choice of datasheet file by device name, and the two
// datasheet files themselves.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "partune/costmodel/calibration_fit.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/kernels/gpu_calibrate.hpp"

using namespace partune;
using namespace partune::kernels;

namespace {

// An H100-like GEMM rule with parameters away from the datasheet file's.
GpuProfile synthetic_gpu() {
  GpuProfile g;
  g.peak_flops_bf16 = 989e12;
  g.peak_flops_fp8 = 1979e12;
  g.hbm_bw = 1e18;  // no memory roofline: the fit models the compute part
  g.hbm_efficiency = 1;
  g.kernel_overhead = 6e-6;
  g.gemm.max_efficiency = 0.83;
  g.gemm.tile = 128;
  g.gemm.sm_count = 132;
  g.gemm.k_half = 300;
  g.gemm.fp8_max_efficiency = 0.66;
  return g;
}

// calibrate_gpu's kinds of shape: squares, a layer's GEMMs, short k over a full wave.
std::vector<calibration::GemmSample> shapes() {
  std::vector<calibration::GemmSample> s;
  for (double e : {1024.0, 2048.0, 3072.0, 4096.0, 8192.0}) s.push_back({e, e, e, 0});
  for (double t : {4096.0, 8192.0})
    for (auto [n, k] : {std::pair{4096.0, 4096.0}, {11008.0, 4096.0}, {4096.0, 11008.0}, {2048.0, 8192.0}})
      s.push_back({t, n, k, 0});
  for (double k : {1024.0, 2048.0}) s.push_back({8192, 8192, k, 0});
  for (auto [mn, k] : {std::pair{1024.0, 16384.0}, {2048.0, 8192.0}, {3072.0, 8192.0}}) s.push_back({mn, mn, k, 0});
  return s;
}

std::vector<calibration::GemmSample> bf16_samples(const GpuProfile& g) {
  auto s = shapes();
  for (auto& x : s) x.seconds = gemm_time(g, Precision::bf16, x.m, x.n, x.k);
  return s;
}

// The FP8 GEMM alone (gemm_time's fp8 path adds the operands' casts, which calibrate does
// not time).
std::vector<calibration::GemmSample> fp8_samples(const GpuProfile& g) {
  auto s = shapes();
  for (auto& x : s)
    x.seconds =
        2 * x.m * x.n * x.k /
            (g.peak_flops_fp8 * gemm_efficiency(g, x.m, x.n, x.k) * g.gemm.fp8_max_efficiency / g.gemm.max_efficiency) +
        g.kernel_overhead;
  return s;
}

// A calibration of the synthetic GPU as calibrate_gpu would have measured it.
GpuCalibration synthetic_calibration(const GpuProfile& g) {
  GpuCalibration c;
  c.base_name = "h100-sxm-device";
  c.base = load_instance_type(c.base_name);
  c.gpu.name = "NVIDIA H100 80GB HBM3";
  c.gpu.sm_count = 132;
  c.gpu.compute_major = 9;
  c.gpu.memory_bytes = 85e9;
  c.gpu.host_cores = 16;
  c.gpu.host_memory_bytes = 128.0 * 1024 * 1024 * 1024;
  c.gpu.libtorch = "2.11.0";
  for (const auto& s : bf16_samples(g))
    c.gemm.push_back({"bf16", "s", s.m, s.n, s.k, {s.seconds, s.seconds, s.seconds}});
  for (const auto& s : fp8_samples(g))
    c.gemm.push_back({"fp8_e4m3", "s", s.m, s.n, s.k, {s.seconds, s.seconds, s.seconds}});
  // t = overhead + bytes / bw per kernel: copy 3.0, add 2.8, gelu 2.6, layer_norm 2.4 TB/s.
  for (auto [kernel, bw] : {std::pair{"copy", 3.0e12}, {"add", 2.8e12}, {"gelu", 2.6e12}, {"layer_norm", 2.4e12}})
    for (double bytes : {256.0, 1e9, 4e9}) {
      const double t = g.kernel_overhead + bytes / bw;
      c.memory.push_back({kernel, bytes / 4, bytes, {t, t, t}});
    }
  // score bmm at 0.3 (the key at head_dim 128), partune's flash at 0.05, SDPA at 0.3.
  for (double d : {64.0, 128.0}) {
    const double f = 2 * 64 * 2048.0 * 2048 * d;
    const double t = f / (989e12 * 0.3 * calibration::score_bmm_head_dim_scale(d)) + g.kernel_overhead;
    c.attention.push_back({"qk", 64, 2048, d, {t, t, t}});
    c.attention.push_back({"av", 64, 2048, d, {t, t, t}});
  }
  for (auto [kernel, eff] : {std::pair{"flash", 0.05}, {"sdpa", 0.3}})
    for (double s : {2048.0, 4096.0}) {
      const double t = 1.75 * 4 * 32 * s * s * 128 / (989e12 * eff) + 2 * g.kernel_overhead;
      c.attention.push_back({kernel, 32, s, 128, {t, t, t}});
    }
  c.copies = {{"host_to_device", 1e9, {0.02, 0.02, 0.02}}, {"device_to_host", 1e9, {0.025, 0.025, 0.025}}};
  return c;
}

}  // namespace

TEST_CASE("the GPU GEMM fit recovers max_efficiency, k_half and the tile from gemm_time", "[gpu_calibration]") {
  const GpuProfile g = synthetic_gpu();
  const GpuGemmFit f = fit_gpu_gemm(bf16_samples(g), g.peak_flops_bf16, g.kernel_overhead, 132);
  CHECK(f.tile == 128);
  CHECK(f.sm_count == 132);
  CHECK(f.fit.max_efficiency == Approx(0.83).epsilon(1e-9));
  CHECK(f.fit.k_half == Approx(300).epsilon(1e-9));
  CHECK(f.fit.residual.rms_relative < 1e-9);
  REQUIRE(f.rms_by_tile.size() == 3);
  for (const auto& [tile, rms] : f.rms_by_tile)
    if (tile != 128) CHECK(rms > 0.01);  // the wrong tiles explain the squares' waves badly

  const Fp8GemmFit p = fit_fp8_gemm(fp8_samples(g), g.peak_flops_fp8, g.kernel_overhead, f);
  CHECK(p.fp8_max_efficiency == Approx(0.66).epsilon(1e-9));
  CHECK(p.residual.rms_relative < 1e-9);
  CHECK(p.residual.samples == static_cast<int>(shapes().size()));
  CHECK_THROWS_AS(fit_fp8_gemm({}, g.peak_flops_fp8, g.kernel_overhead, f), std::invalid_argument);
}

TEST_CASE("a GPU calibration's profile carries the fits and loads back", "[gpu_calibration]") {
  const GpuProfile g = synthetic_gpu();
  GpuCalibration c = synthetic_calibration(g);
  fit_gpu_calibration(c);
  // The 1024^3 and 2048^3 products take under 10 kernel overheads: left out, saying so.
  REQUIRE(c.notes.size() == 2);
  CHECK_THAT(c.notes[0], Catch::StartsWith("bf16 GEMM: 16 of 18 samples fitted"));
  CHECK_THAT(c.notes[1], Catch::StartsWith("FP8 GEMM: 16 of 18 samples fitted"));
  CHECK(c.gemm_fit.fit.residual.samples == 16);
  CHECK(unusable_gpu_fits(c).empty());
  CHECK(c.memory_fit.kernel_overhead == Approx(6e-6).epsilon(1e-6));
  // (8 x 2.4 + 16 x 2.6 + 14 x 2.8 TB/s, harmonically) / the datasheet's 3.35 TB/s.
  CHECK(c.hbm_efficiency == Approx(38.0 / (8 / 2.4 + 16 / 2.6 + 14 / 2.8) / 3.35).epsilon(1e-6));

  const std::string path = (std::filesystem::temp_directory_path() / "partune-test-gpu-measured.yaml").string();
  {
    std::ofstream out(path);
    out << gpu_instance_type_yaml(c, "gpu-measured", "partune calibrate --device cuda --out gpu-measured.yaml");
  }
  const InstanceType it = load_instance_type(path);
  std::remove(path.c_str());
  CHECK(it.name == "gpu-measured");
  CHECK(it.gpus_per_node == 1);
  CHECK(it.gpu.name == "NVIDIA H100 80GB HBM3");
  CHECK(it.gpu.gemm.max_efficiency == Approx(0.83).epsilon(1e-3));
  CHECK(it.gpu.gemm.k_half == Approx(300).epsilon(1e-3));
  CHECK(it.gpu.gemm.tile == 128);
  CHECK(it.gpu.gemm.sm_count == 132);
  CHECK(it.gpu.gemm.fp8_max_efficiency == Approx(0.66).epsilon(1e-3));
  // The intercept of back-to-back eager calls is the host's dispatch; the device's own gap
  // between kernels stays the datasheet's (h100-sxm-device: 2.4 us).
  CHECK(it.gpu.dispatch == Approx(6e-6).epsilon(1e-3));
  CHECK(it.gpu.kernel_overhead == Approx(2.4e-6).epsilon(1e-9));
  CHECK(it.gpu.attention.score_bmm_efficiency == Approx(0.3).epsilon(1e-3));
  CHECK(it.gpu.attention.flash_efficiency == Approx(0.05).epsilon(1e-3));
  CHECK_FALSE(it.gpu.attention.flash_fp32);
  CHECK(it.gpu.hbm_bytes == Approx(85e9).epsilon(1e-3));
  CHECK(it.pcie_bw == Approx(40e9).epsilon(1e-3));  // the slower direction
  CHECK(it.host_cores == 16);
  // Not measured: the datasheet file's.
  CHECK(it.gpu.peak_flops_bf16 == Approx(989e12));
  CHECK(it.gpu.hbm_bw == Approx(3350e9));
  CHECK(it.gpu.reserved_bytes == Approx(c.base.gpu.reserved_bytes));
  CHECK(it.nic.bw == Approx(c.base.nic.bw));
}

TEST_CASE("a GPU calibration keeps the datasheet values it could not fit, saying why", "[gpu_calibration]") {
  GpuCalibration c = synthetic_calibration(synthetic_gpu());
  c.gemm.erase(std::remove_if(c.gemm.begin(), c.gemm.end(), [](const auto& x) { return x.dtype == "bf16"; }),
               c.gemm.end());
  c.attention.erase(
      std::remove_if(c.attention.begin(), c.attention.end(), [](const auto& x) { return x.kernel == "flash"; }),
      c.attention.end());
  fit_gpu_calibration(c);
  CHECK_FALSE(c.gemm_measured);
  CHECK_FALSE(c.fp8_measured);  // it needs bf16's tile and k_half
  CHECK_FALSE(c.flash_measured);
  CHECK(c.sdpa_measured);
  REQUIRE(c.notes.size() == 2);
  CHECK_THAT(c.notes.back(), Catch::Contains("FP8 GEMM not fitted: it takes the bf16 fit's tile and k_half"));
  const InstanceType it = measured_gpu_instance_type(c, "x");
  CHECK(it.gpu.gemm.max_efficiency == c.base.gpu.gemm.max_efficiency);
  CHECK(it.gpu.gemm.fp8_max_efficiency == c.base.gpu.gemm.fp8_max_efficiency);
  CHECK(it.gpu.attention.flash_efficiency == c.base.gpu.attention.flash_efficiency);
  const std::string yaml = gpu_instance_type_yaml(c, "x", "cmd");
  CHECK_THAT(yaml, Catch::Contains("gemm_bf16: {measured: false}"));
  CHECK_THAT(yaml, Catch::Contains("[h100-sxm-device] the datasheet value: not measured"));
}

TEST_CASE("the datasheet file is chosen by the CUDA device's name", "[gpu_calibration]") {
  CHECK(datasheet_instance_type_for("NVIDIA H100 80GB HBM3") == "h100-sxm-device");
  CHECK(datasheet_instance_type_for("NVIDIA H200") == "h200-device");
  CHECK(datasheet_instance_type_for("NVIDIA H100 PCIe") == "");
  CHECK(datasheet_instance_type_for("NVIDIA H100 NVL") == "");
  CHECK(datasheet_instance_type_for("NVIDIA GH200 480GB") == "");
  CHECK(datasheet_instance_type_for("NVIDIA A100-SXM4-80GB") == "");
}

TEST_CASE("the single-GPU datasheet files load", "[gpu_calibration]") {
  for (const char* name : {"h100-sxm-device", "h200-device"}) {
    INFO(name);
    const InstanceType it = load_instance_type(name);
    CHECK(it.name == name);
    CHECK(it.gpus_per_node == 1);
    CHECK(it.gpu.peak_flops_bf16 == Approx(989e12));
    CHECK(it.gpu.peak_flops_fp8 == Approx(1979e12));
    CHECK(it.gpu.gemm.sm_count == 132);
    CHECK(it.gpu.gemm.fp8_max_efficiency > 0);
    CHECK(it.host_cores == 16);
  }
  CHECK(load_instance_type("h100-sxm-device").gpu.hbm_bw == Approx(3350e9));
  CHECK(load_instance_type("h200-device").gpu.hbm_bw == Approx(4800e9));
  CHECK(load_instance_type("h200-device").gpu.hbm_bytes > load_instance_type("h100-sxm-device").gpu.hbm_bytes);
}
