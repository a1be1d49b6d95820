// The backend's device and number format (compute_device.hpp) as far as a machine without
// a GPU can check them: a bf16 model trains on fp32 master weights (executor.cpp) with the
// fp32 model's losses to bf16 precision, the optimizer's updates below bf16's resolution
// are kept, the CUDA device and fp8 are refused by name, and the CPU ranks connect over
// Gloo. The GPU itself: scripts/device-check.sh.
//
// LibTorch first, then catch.hpp with c10's CHECK undefined (see test_backend.cpp).
#include <cmath>
#include <string>

#include <torch/torch.h>

#include "partune/backend/communicators.hpp"
#include "partune/backend/compute_device.hpp"
#include "partune/backend/executor.hpp"
#include "partune/backend/fp8_linear.hpp"
#include "partune/backend/gpt_model.hpp"
#include "partune/costmodel/scaled_job.hpp"
#include "partune/backend/token_source.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/program_builder.hpp"

#undef CHECK
#include <catch2/catch.hpp>

using namespace partune;
using namespace partune::backend;

namespace {

Job tiny_job(const std::string& parallel = "{microbatches: 2}") {
  return parse_job("kind: job\nname: tiny\n"
                   "model: {name: tiny, layers: 2, hidden: 32, heads: 4, vocab: 64, seq_len: 16, tied_embeddings: true}\n"
                   "cluster: {instance_type: {base: local-cpu, gpus_per_node: 1}, nodes: 1}\n"
                   "training: {global_batch: 8, precision: bf16, optimizer: adam}\n"
                   "parallel: " + parallel + "\n",
                   "<test>");
}

// `steps` losses of the job's one rank with its model in `dtype` (the executor keeps fp32
// masters for a bf16 model), and the model after them.
std::vector<double> run(const Job& base, torch::ScalarType dtype, int steps, double lr, GPTModel* out = nullptr) {
  const Job job = scaled_job(base, {});
  const ModelSpec& c = job.model;
  const TokenSource tokens(3, c.vocab);
  const RankProgram program = build_program(job, 0, ProgramOptions{Granularity::layer});
  GPTModel model(c, 3);
  model->to(dtype);
  ProgramExecutor ex(job, program, model, OptimizerSettings{Optimizer::adam, lr});
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::int64_t> flat = tokens.batch(step, 8, c.seq_len);
    const torch::Tensor t = torch::from_blob(flat.data(), {8, c.seq_len + 1}, torch::kLong).clone();
    std::vector<MicroBatchData> data;
    for (int i = 0; i < 2; ++i) {
      const torch::Tensor rows = t.slice(0, 4 * i, 4 * i + 4);
      data.push_back({rows.slice(1, 0, c.seq_len).contiguous(), rows.slice(1, 1, c.seq_len + 1).contiguous()});
    }
    losses.push_back(ex.run(data).loss);
  }
  if (out) *out = model;
  return losses;
}

}  // namespace

// bf16 keeps 8 significant bits: a loss computed in it is within a few units of 2^-8 of
// the fp32 model's (the same initial weights rounded once), step after step.
TEST_CASE("compute device: a bf16 model trains as the fp32 model does, to bf16 precision", "[backend][device]") {
  for (const char* parallel : {"{microbatches: 2}", "{microbatches: 2, offload_optimizer: true}"}) {
    INFO(parallel);
    const std::vector<double> fp32 = run(tiny_job(parallel), torch::kFloat, 4, 1e-2);
    const std::vector<double> bf16 = run(tiny_job(parallel), torch::kBFloat16, 4, 1e-2);
    for (std::size_t i = 0; i < fp32.size(); ++i) {
      INFO("step " << i << ": fp32 " << fp32[i] << ", bf16 " << bf16[i]);
      CHECK(std::abs(bf16[i] - fp32[i]) <= std::ldexp(1.0, -6) * fp32[i]);
    }
    CHECK(bf16.back() < bf16.front());  // it trains
  }
}

// Steps smaller than half a bf16 unit of the weights they change: a bf16 optimizer would
// round each of them away and never move those weights. With fp32 masters they add up,
// so the bf16 model moves where the fp32 model's weights, rounded to bf16, moved (the
// reference: the same steps in fp32). Adam's steps are at most about the learning rate,
// 2^-13 here: a quarter unit for weights of magnitude >= 2^-4 (bf16 unit 2^-11 there).
TEST_CASE("compute device: updates below bf16's resolution are kept by the fp32 masters", "[backend][device]") {
  const double lr = std::ldexp(1.0, -13);
  const ModelSpec c = scaled_model(tiny_job().model, {});
  GPTModel initial(c, 3), fp32(nullptr), bf16(nullptr);
  run(tiny_job(), torch::kFloat, 8, lr, &fp32);
  run(tiny_job(), torch::kBFloat16, 8, lr, &bf16);
  long large = 0, expected = 0, moved = 0;
  const auto w0 = initial->parameters(), w32 = fp32->parameters(), w16 = bf16->parameters();
  REQUIRE(w16.size() == w0.size());
  for (std::size_t i = 0; i < w0.size(); ++i) {
    REQUIRE(w16[i].scalar_type() == torch::kBFloat16);  // the model stays in its format
    const torch::Tensor start = w0[i].to(torch::kBFloat16);
    const torch::Tensor big = w0[i].abs() >= 0.0625;
    large += big.sum().item<long>();
    expected += (big & (w32[i].to(torch::kBFloat16) != start)).sum().item<long>();
    moved += (big & (w16[i] != start)).sum().item<long>();
  }
  INFO(large << " weights of magnitude >= 2^-4: the fp32 run moved " << expected << " of them (rounded to bf16), "
             << "the bf16 run " << moved);
  REQUIRE(large > 100);
  REQUIRE(expected > large / 10);
  CHECK(std::abs(moved - expected) <= expected / 4);
}

TEST_CASE("compute device: the CPU runs fp32 over Gloo, CUDA and fp8 are refused by name", "[backend][device]") {
  const ComputeDevice cpu = compute_device(DeviceKind::cpu, Precision::bf16, 0);
  CHECK_FALSE(cpu.cuda());
  CHECK(cpu.dtype == torch::kFloat);
  CHECK(cpu.describe() == "cpu fp32");
  CHECK(why_not_on_device(DeviceKind::cpu, Precision::fp8).empty());
  // fp8 runs its GEMMs through at::_scaled_mm: refused by name where LibTorch lacks it.
  if (!fp8_gemms_available())
    CHECK(why_not_on_device(DeviceKind::cuda, Precision::fp8).find("precision fp8 needs at::_scaled_mm") !=
          std::string::npos);
  CHECK(comm_backend_for(torch::Device(torch::kCPU), 2) == CommBackendKind::gloo);
  if (!torch::cuda::is_available()) {
    CHECK(why_not_on_device(DeviceKind::cuda, Precision::bf16).find("no CUDA device is visible") != std::string::npos);
    CHECK_THROWS_WITH(compute_device(DeviceKind::cuda, Precision::bf16, 0),
                      Catch::Matchers::Contains("no CUDA device is visible"));
  }
}
