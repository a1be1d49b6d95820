// Blackwell's block-scaled GEMM formats (precision: mxfp8 | fp4): the GEMMs at their own
// peaks (MB26 §4.4: B200 MXFP8 at the FP8 tensor rate 4500, FP4 9000 TFLOP/s dense) and
// efficiencies, each operand cast from bf16 with its block scales (MXFP8: 1 byte and an
// e8m0 scale per 32 elements; NVFP4: half a byte and an e4m3 scale per 16), everything
// else bf16 mixed precision; refused where the GPU has no such peak.
#include <catch2/catch.hpp>

#include <string>
#include <utility>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/layer_plan.hpp"
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
// 128 over 148 SMs = 28 waves (occupancy 4096 / 4144), k / (k + 512) of the main loop, 2.4
// us a launch; the operands arrive cast (the plan's work, below).
TEST_CASE("MXFP8 and FP4 GEMMs run at their peaks", "[fp8][mxfp8]") {
  const GpuProfile b200 = load_instance_type("p6-b200.48xlarge").gpu;
  const double n = 8192, flops = 2 * n * n * n;
  const double shape = (4096.0 / (28 * 148)) * (n / (n + 512));
  const double launch = 2.4e-6;
  CHECK(gemm_time(b200, Precision::mxfp8, n, n, n) == Approx(flops / (4500e12 * 0.89 * shape) + launch).epsilon(1e-9));
  CHECK(gemm_time(b200, Precision::fp4, n, n, n) == Approx(flops / (9000e12 * 0.79 * shape) + launch).epsilon(1e-9));
}

// Their casts write the row-wise and column-wise copies with block scales in one pass an
// operand: MXFP8 1 byte and an e8m0 scale per 32 elements each way, NVFP4 half a byte and
// an e4m3 scale per 16 (fp8_casts.cpp): X and W forward, dY backward.
TEST_CASE("MXFP8 and FP4 casts carry their block scales", "[fp8][mxfp8]") {
  for (const auto& [precision, bytes] : {std::pair<std::string, double>{"mxfp8", 2 + 2 * (1 + 1.0 / 32)},
                                         std::pair<std::string, double>{"fp4", 2 + 2 * (0.5 + 1.0 / 16)}}) {
    INFO(precision);
    const Job j = llama_job(precision);
    for (const PlanOp& op : transformer_layer_plan(j.model, plan_config(j)).ops) {
      if (op.kind != PlanOpKind::gemm) continue;
      CHECK(op.forward_work.total_bytes() == Approx(bytes * (op.m * op.k + op.k * op.n)));
      CHECK(op.backward_work.total_bytes() == Approx(bytes * op.m * op.n));
    }
  }
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
