// `partune calibrate --records`: recorded runs' calibrate.json read back and fitted again by
// today's rules (kernels/gpu_calibration_record.cpp). The three H100 runs of 2026-11-26 pooled
// must give the numbers the catalog's measured profile carries (its calibration.fits, four
// digits written out by hand), and a record of another GPU is refused by file.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "partune/costmodel/scenario.hpp"
#include "partune/kernels/gpu_calibrate.hpp"

using namespace partune;
using namespace partune::kernels;
namespace fs = std::filesystem;

namespace {

std::string record(const std::string& run) {
  return std::string(PARTUNE_SOURCE_DIR) + "/docs/device-runs/2026-11-26-" + run + "/calibrate.json";
}

}  // namespace

TEST_CASE("the recorded H100 runs pool into the catalog's measured profile", "[calibration][records]") {
  GpuCalibration c =
      gpu_calibration_from_records({record("h100/first-run"), record("h100/second-run"), record("h100/third-run")});
  CHECK(c.records == 3);
  CHECK(c.gpu.name == "NVIDIA H100 80GB HBM3");
  CHECK(c.base_name == "h100-sxm-device");
  // 13 bf16 and 4 fp8 GEMM shapes, 2 sdpa and 2 flash calls a run.
  CHECK(c.gemm.size() == 3 * 17);
  int accumulated = 0;
  for (const auto& a : c.attention) accumulated += a.gradients_accumulated ? 1 : 0;
  CHECK(accumulated == 3 * 4);  // every flash and sdpa call of these records
  fit_gpu_calibration(c);
  REQUIRE(c.gemm_measured);
  REQUIRE(c.sdpa_measured);
  CHECK(c.gemm_fit.fit.max_efficiency == Approx(0.7579).epsilon(2e-4));
  CHECK(c.gemm_fit.fit.k_half == Approx(194.1).epsilon(5e-4));
  CHECK(c.gemm_fit.tile == 64);
  CHECK(c.sdpa_fit.flash_efficiency == Approx(0.5135).epsilon(2e-4));
  CHECK(c.sdpa_fit.seq_half == Approx(987).margin(1));
  // The catalog's file holds what this fit writes.
  const GpuProfile measured = load_instance_type("h100-sxm-device-measured").gpu;
  CHECK(measured.attention.kernel == AttentionKernel::cudnn);
  CHECK(measured.attention.flash_efficiency == Approx(c.sdpa_fit.flash_efficiency).epsilon(1e-9));
  CHECK(measured.gemm.max_efficiency == Approx(c.gemm_fit.fit.max_efficiency).epsilon(1e-9));
}

TEST_CASE("records of another GPU, or not a GPU calibration, are refused by file", "[calibration][records]") {
  const fs::path dir = fs::temp_directory_path() / "partune-records-test";
  fs::create_directories(dir);
  std::ifstream in(record("h200"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const fs::path h200 = dir / "calibrate.json";
  std::ofstream(h200) << text;
  try {
    (void)gpu_calibration_from_records({record("h100/second-run"), h200.string()});
    FAIL("an H200 record pooled with an H100's");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find(h200.string()) != std::string::npos);
    CHECK(what.find("NVIDIA H200") != std::string::npos);
  }
  // A record whose compute capability is not MAJOR.MINOR is refused by file and field.
  std::string garbled = text;
  const auto at = garbled.find("\"compute_capability\": \"9.0\"");
  REQUIRE(at != std::string::npos);
  garbled.replace(at, std::string("\"compute_capability\": \"9.0\"").size(), "\"compute_capability\": \"sm90\"");
  const fs::path cc = dir / "cc.json";
  std::ofstream(cc) << garbled;
  try {
    (void)gpu_calibration_from_records({cc.string()});
    FAIL("compute_capability sm90 accepted");
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    CHECK(what.find(cc.string()) != std::string::npos);
    CHECK(what.find("compute_capability") != std::string::npos);
  }
  const fs::path bad = dir / "bad.json";
  std::ofstream(bad) << "{\"device\": \"cpu\"}";
  CHECK_THROWS_AS(gpu_calibration_from_records({bad.string()}), std::invalid_argument);
  fs::remove_all(dir);
}
