// The optimizer's moments in 16 bits (training.moment_precision): Megatron's
// precision-aware optimizer (--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, its model zoo's
// fp8 and mxfp8 recipes) and DeepSeek-V3's BF16 moments. Checked by hand for GPT-2 small
// (124,439,808 parameters) on one p4d node, fp16 with Adam, the states sharded over the
// node's 8 ranks:
//   - a parameter keeps a 16-bit weight (2 B), a 16-bit gradient (2 B), an fp32 master
//     weight (4 B) and two moments: 4 + 4 B in fp32 (16 B in all), 2 + 2 B in bf16 (12 B);
//   - the host's step (offload_optimizer) reads the gradient (2 B), reads and writes the
//     master weight and the moments (2 x (4 + 2 + 2) B) and writes the weight (2 B): 20 B a
//     parameter against fp32's 28, for the node's 8 ranks at once over its host memory
//     bandwidth (211 GB/s, scenarios/clusters/p4d.24xlarge.yaml).
#include <catch2/catch.hpp>

#include "job_fixtures.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;
using partune::testing::scenario_error_key;

namespace {

constexpr double kParams = 124439808.0, kHostBw = 211e9;

Job sharded_gpt2(Precision moments) {
  Job job = p4d_job("gpt2-small", 1, 16);
  job.parallel.sharded_data_parallel_degree = 8;
  job.training.moment_precision = moments;
  return job;
}

double host_step_seconds(const Job& job) {
  double s = 0;
  for (const Instruction& in : build_program(job, 0).ops)
    if (in.kind == OpKind::optimizer_step) s += in.seconds;
  return s;
}

}  // namespace

TEST_CASE("bf16 moments keep 8 B of optimizer state a parameter instead of 12", "[moments][memory]") {
  const Job fp32 = sharded_gpt2(Precision::fp32), bf16 = sharded_gpt2(Precision::bf16);
  require_valid(bf16);
  const MemoryBreakdown a = stage_memory(fp32, 0), b = stage_memory(bf16, 0);
  CHECK(a.optimizer_states == Approx(kParams * 12 / 8));
  CHECK(b.optimizer_states == Approx(kParams * 8 / 8));
  CHECK(b.parameters == a.parameters);
  CHECK(b.gradients == a.gradients);
  const Job fp16 = sharded_gpt2(Precision::fp16);
  CHECK(stage_memory(fp16, 0).optimizer_states == Approx(kParams * 8 / 8));
}

TEST_CASE("the host's optimizer step moves 20 B a parameter with bf16 moments", "[moments][offload]") {
  Job fp32 = sharded_gpt2(Precision::fp32), bf16 = sharded_gpt2(Precision::bf16);
  fp32.parallel.offload_optimizer = bf16.parallel.offload_optimizer = true;
  require_valid(bf16);
  // 8 ranks x (P / 8) x B over the host's 211 GB/s.
  CHECK(host_step_seconds(fp32) == Approx(kParams * 28 / kHostBw).epsilon(1e-9));
  CHECK(host_step_seconds(bf16) == Approx(kParams * 20 / kHostBw).epsilon(1e-9));
}

TEST_CASE("moment_precision is read, written back and checked", "[moments][scenario]") {
  const std::string src = std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/gpt3-175b-p4d-120.yaml";
  const Job job = load_job(src, {"precision=bf16", "moment_precision=bf16"});
  CHECK(job.training.moment_precision == Precision::bf16);
  CHECK(parse_job(job_yaml(job, "a test"), "written.yaml").training.moment_precision == Precision::bf16);
  const Job plain = load_job(src);
  CHECK(plain.training.moment_precision == Precision::fp32);
  CHECK(job_yaml(plain, "a test").find("moment_precision") == std::string::npos);

  Job fp8 = job;
  fp8.training.moment_precision = Precision::fp8;
  CHECK(check_job(fp8).key == "training.moment_precision");
  Job torch_adam = job;
  torch_adam.training.optimizer_impl = OptimizerImpl::torch;
  CHECK(check_job(torch_adam).key == "training.moment_precision");
  const std::string text = "kind: job\nname: t\nmodel: {base: gpt2-small}\n"
                           "cluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
                           "training: {global_batch: 16, precision: bf16, moment_precision: int8}\n";
  CHECK(scenario_error_key(text, "bad.yaml") == "training.moment_precision");
}
