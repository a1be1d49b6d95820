// Blackwell's block-scaled GEMM formats (precision: mxfp8 | fp4): the GEMMs at their own
// peaks (MB26 §4.4: B200 MXFP8 at the FP8 tensor rate 4500, FP4 9000 TFLOP/s dense) and
// efficiencies, each operand cast from bf16 with its block scales (MXFP8: 1 byte and an
// e8m0 scale per 32 elements; NVFP4: half a byte and an e4m3 scale per 16), everything
// else bf16 mixed precision; refused where the GPU has no such peak.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

namespace {

Job llama_job(const std::string& precision, const std::string& instance = "p6-b200.48xlarge") {
  return load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/llama-3-70b-p5-16.yaml",
                  {"precision=" + precision, "instance_type=" + instance});
}

}  // namespace

// An 8192^3 GEMM on a B200 (p6-b200.48xlarge's profile): 64 x 64 = 4096 output tiles of
// 128 over 148 SMs = 28 waves (occupancy 4096 / 4144), k / (k + 512) of the main loop;
// HBM 8000 GB/s at 0.74, 2.4 us a launch.
TEST_CASE("MXFP8 and FP4 GEMMs run at their peaks and pay for their block-scaled casts", "[fp8][mxfp8]") {
  const GpuProfile b200 = load_instance_type("p6-b200.48xlarge").gpu;
  const double n = 8192, flops = 2 * n * n * n;
  const double shape = (4096.0 / (28 * 148)) * (n / (n + 512));
  const double hbm = 8000e9 * 0.74, launch = 2.4e-6, operands = 2 * n * n;
  const double mxfp8 = flops / (4500e12 * 0.89 * shape) + launch + (2 + 1 + 1.0 / 32) * operands / hbm + 2 * launch;
  const double fp4 = flops / (9000e12 * 0.79 * shape) + launch + (2 + 0.5 + 1.0 / 16) * operands / hbm + 2 * launch;
  CHECK(gemm_time(b200, Precision::mxfp8, n, n, n) == Approx(mxfp8).epsilon(1e-9));
  CHECK(gemm_time(b200, Precision::fp4, n, n, n) == Approx(fp4).epsilon(1e-9));
  // MXFP8 moves 1/32 of a byte more per element than per-tensor FP8 at the same rate.
  CHECK(gemm_time(b200, Precision::mxfp8, n, n, n) > gemm_time(b200, Precision::fp8, n, n, n));
  CHECK(gemm_time(b200, Precision::fp4, n, n, n) < gemm_time(b200, Precision::mxfp8, n, n, n));
}

TEST_CASE("MXFP8 and FP4 keep bf16's memory and shorten a LLaMA-3 70B step on B200", "[fp8][mxfp8]") {
  const Job bf16 = llama_job("bf16"), mx = llama_job("mxfp8"), fp4 = llama_job("fp4");
  CHECK(peak_memory(mx).total() == peak_memory(bf16).total());
  CHECK(peak_memory(fp4).total() == peak_memory(bf16).total());
  const double a = estimate(bf16).step_time, b = estimate(mx).step_time, c = estimate(fp4).step_time;
  CHECK(b < a);
  CHECK(c < b);
  CHECK(c > 0.25 * a);  // attention, element-wise kernels, casts and communication stay
}

TEST_CASE("MXFP8 and FP4 on Hopper are refused, naming the key and the reason", "[fp8][mxfp8]") {
  for (const char* precision : {"mxfp8", "fp4"}) {
    INFO(precision);
    try {
      llama_job(precision, "p5.48xlarge");
      FAIL("accepted on p5");
    } catch (const ScenarioError& e) {
      CHECK(e.key() == "training.precision");
      CHECK(std::string(e.what()).find("MXFP8 and FP4 need Blackwell") != std::string::npos);
    }
    CHECK(estimate(llama_job(precision, "p6e-gb200.36xlarge")).step_time > 0);
  }
}
