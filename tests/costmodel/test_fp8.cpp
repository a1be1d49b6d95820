// FP8 training (Transformer Engine's recipe): GEMMs at the FP8 peak with their casts,
// everything else as bf16 mixed precision; only on instance types with an FP8 peak.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

namespace {

Job llama_job(const std::string& precision, const std::string& instance = "p5.48xlarge") {
  return load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/llama-3-70b-p5-16.yaml",
                  {"precision=" + precision, "instance_type=" + instance});
}

}  // namespace

// An 8192^3 GEMM on an H100 (p5.48xlarge's profile, calibrate's measured fit): 128 x 128 =
// 16384 output tiles of 64 over 132 SMs = 125 waves (occupancy 16384 / 16500), k / (k +
// 194.1) of the main loop; at FP8 the efficiency is fp8_max_efficiency 0.6992 instead of
// 0.7579 and the peak 1979 TFLOP/s. The operands arrive cast (their casts are the plan's).
TEST_CASE("an FP8 GEMM runs at the FP8 peak", "[fp8]") {
  const GpuProfile h100 = load_instance_type("p5.48xlarge").gpu;
  const double n = 8192, flops = 2 * n * n * n;
  const double shape = (16384.0 / (125 * 132)) * (n / (n + 194.1));
  const double launch = 2.4e-6;
  const double bf16 = flops / (989e12 * 0.7579 * shape) + launch;
  const double fp8 = flops / (1979e12 * 0.6992 * shape) + launch;
  CHECK(gemm_time(h100, Precision::bf16, n, n, n) == Approx(bf16).epsilon(1e-9));
  CHECK(gemm_time(h100, Precision::fp8, n, n, n) == Approx(fp8).epsilon(1e-9));
}

// Transformer Engine's casts of a GEMM Y[m x n] = X[m x k] W[k x n], as the plan's work of
// the op (fp8_casts.cpp): delayed scaling casts and transposes X and W forward and dY
// backward in one pass each (read 2 bytes, write 1 + 1); current scaling reads each first
// for its amax (2 bytes, a kernel more); the eager path (LibTorch's operators, the
// backend's) moves more than either.
TEST_CASE("an FP8 GEMM's casts follow the recipe", "[fp8][recipe]") {
  const auto fc1 = [](const std::string& set) {
    const Job j = load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/llama-3-70b-p5-16.yaml",
                           {"precision=fp8", set});
    for (const PlanOp& op : transformer_layer_plan(j.model, plan_config(j)).ops)
      if (op.role == PlanOpRole::fc1) return op;
    return PlanOp{};
  };
  const PlanOp delayed = fc1("fp8_recipe=delayed"), current = fc1("fp8_recipe=current"),
               eager = fc1("kernel_fusion=eager");
  REQUIRE(delayed.casts_in_work);
  const double m = delayed.m, n = delayed.n, k = delayed.k;
  CHECK(delayed.forward_work.total_bytes() == Approx(4 * (m * k + k * n)));
  CHECK(delayed.backward_work.total_bytes() == Approx(4 * m * n));
  CHECK(delayed.forward_work.total_kernels() == 2);
  CHECK(delayed.backward_work.total_kernels() == 1);
  CHECK(current.forward_work.total_bytes() == Approx(6 * (m * k + k * n)));
  CHECK(current.backward_work.total_bytes() == Approx(6 * m * n));
  CHECK(current.forward_work.total_kernels() == 4);
  CHECK(eager.forward_work.total_bytes() > current.forward_work.total_bytes());
  CHECK(eager.backward_work.total_kernels() > current.backward_work.total_kernels());
}

TEST_CASE("FP8 keeps bf16's memory and shortens the step of a LLaMA-3 70B job", "[fp8]") {
  const Job bf16 = llama_job("bf16"), fp8 = llama_job("fp8");
  CHECK(peak_memory(fp8).total() == peak_memory(bf16).total());
  const Estimate a = estimate(bf16), b = estimate(fp8);
  CHECK(b.step_time < a.step_time);
  // Not 2x: attention, element-wise kernels, casts and communication do not speed up.
  CHECK(b.step_time > 0.5 * a.step_time);
}

TEST_CASE("FP8 on an A100 is refused, naming the key and the reason", "[fp8]") {
  try {
    llama_job("fp8", "p4d.24xlarge");
    FAIL("fp8 on p4d was accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "training.precision");
    CHECK(std::string(e.what()).find("FP8 needs Hopper or later") != std::string::npos);
  }
  // On the H200 instance it runs.
  CHECK(estimate(llama_job("fp8", "p5e.48xlarge")).step_time > 0);
}
