// State offload (ZeRO-Offload, FSDP CPU offload): the optimizer state, and with
// offload_parameters the parameter shard, live on the host. Checked by hand for GPT-2
// small (124,439,808 parameters, tied: 12 layers of 7,087,872, the embedding 39,383,808
// and the final norm 1,536) on one p4d node, fp16 with Adam:
//   - the host step reads the gradient (2 B), reads and writes the fp32 master weight and
//     both moments (2 x 12 B) and writes the 16-bit weight (2 B): 28 B per parameter,
//     for the 8 ranks of the node at once over the node's host memory bandwidth (211 GB/s,
//     scenarios/clusters/p4d.24xlarge.yaml);
//   - per step the rank's gradient shard goes down and its updated 16-bit shard comes up
//     (2 B per parameter each way), or, with offload_parameters, every gather of a
//     layer's units starts with that layer's shard coming up from the host.
#include <catch2/catch.hpp>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

constexpr double kParams = 124439808.0, kLayer = 7087872.0, kEmbedding = 39383808.0, kHead = 1536.0;
constexpr double kHostBw = 211e9;

struct Copies {
  int down = 0, up = 0;
  double down_bytes = 0, up_bytes = 0, host_step = 0;
  int steps = 0;
};

Copies copies(const RankProgram& prog) {
  Copies c;
  for (const Instruction& in : prog.ops) {
    if (in.kind == OpKind::offload_gradients) ++c.down, c.down_bytes += in.bytes;
    if (in.kind == OpKind::reload_parameters) ++c.up, c.up_bytes += in.bytes;
    if (in.kind == OpKind::optimizer_step) ++c.steps, c.host_step += in.seconds;
  }
  return c;
}

}  // namespace

TEST_CASE("ZeRO-Offload over a sharded optimizer: the shard down, the host step, the shard up",
          "[offload][program]") {
  Job job = p4d_job("gpt2-small", 1, 16);
  job.parallel.shard_optimizer_state = true;  // dp 8: each rank steps 1/8
  job.parallel.offload_optimizer = true;
  require_valid(job);
  const Copies c = copies(build_program(job, 3));
  CHECK(c.down == 1);
  CHECK(c.up == 1);
  CHECK(c.steps == 1);
  CHECK(c.down_bytes == Approx(kParams / 8 * 2));
  CHECK(c.up_bytes == Approx(kParams / 8 * 2));
  // 8 ranks x (P / 8) x 28 B over the host's 211 GB/s: 16.5 ms.
  CHECK(c.host_step == Approx(kParams * 28 / kHostBw).epsilon(1e-9));
}

TEST_CASE("FSDP CPU offload: every gather's shard comes from the host first", "[offload][program]") {
  Job job = p4d_job("gpt2-small", 1, 16);
  job.parallel.microbatches = 2;
  job.parallel.sharded_data_parallel_degree = 4;
  job.parallel.sharding_flavor = ShardingFlavor::fsdp;
  job.parallel.offload_optimizer = true;
  job.parallel.offload_parameters = true;
  require_valid(job);
  const RankProgram prog = build_program(job, 0);
  const Copies c = copies(prog);
  // 2 micro-batches x 2 passes x 12 layers, one copy before each gather; none after the
  // step (the updated shard stays on the host).
  CHECK(c.up == 2 * 2 * 12);
  CHECK(c.up_bytes == Approx(2 * 2 * (12 * kLayer + kEmbedding + kHead) * 2 / 4).epsilon(1e-12));
  CHECK(c.down == 1);
  CHECK(c.down_bytes == Approx(kParams / 4 * 2));
  // Two replicas of 4: each rank steps a quarter of the model, 8 ranks on the host at once.
  CHECK(c.host_step == Approx(8 * kParams / 4 * 28 / kHostBw).epsilon(1e-9));
  // The copy precedes its gather.
  for (std::size_t i = 0; i + 1 < prog.ops.size(); ++i)
    if (prog.ops[i].kind == OpKind::reload_parameters) {
      INFO("instruction " << i);
      CHECK(prog.ops[i + 1].kind == OpKind::all_gather);
      CHECK(prog.ops[i + 1].group == CommGroup::sharded);
    }
}

TEST_CASE("offloaded states leave the device for the host", "[offload][memory]") {
  Job base = p4d_job("gpt2-small", 1, 16);
  base.parallel.sharded_data_parallel_degree = 8;
  Job opt = base;
  opt.parallel.offload_optimizer = true;
  Job both = opt;
  both.parallel.offload_parameters = true;
  const MemoryBreakdown b = stage_memory(base, 0), o = stage_memory(opt, 0), p = stage_memory(both, 0);
  // fp32 master weight and two moments: 12 B per parameter, an eighth on each rank.
  CHECK(b.optimizer_states == Approx(kParams * 12 / 8));
  CHECK(o.optimizer_states == 0);
  CHECK(o.host_offload - b.host_offload == Approx(kParams * 12 / 8));
  CHECK(o.parameters == Approx(kParams * 2 / 8));
  CHECK(p.parameters == 0);
  CHECK(p.host_offload - b.host_offload == Approx(kParams * (12 + 2) / 8));
  CHECK(o.gradients == b.gradients);  // the gradient shard accumulates on the device
}

TEST_CASE("the estimate pays the host step and the copies over the rank's PCIe share", "[offload][estimator]") {
  Job job = p4d_job("gpt2-small", 1, 16);
  job.parallel.shard_optimizer_state = true;
  const Estimate on_device = estimate(job);
  job.parallel.offload_optimizer = true;
  const Estimate offloaded = estimate(job);
  REQUIRE(offloaded.fits);
  CHECK(offloaded.breakdown.optimizer == Approx(kParams * 28 / kHostBw).epsilon(1e-9));
  // Two copies of P / 8 x 2 B over p4d's PCIe switch (12.5 GB/s) shared by its two GPUs.
  const double pcie_share = 12.5e9 / 2;
  CHECK(offloaded.breakdown.offload_exposed - on_device.breakdown.offload_exposed ==
        Approx(2 * kParams / 8 * 2 / pcie_share).epsilon(1e-9));
  CHECK(offloaded.memory.optimizer_states == 0);
}

TEST_CASE("state offload is refused where it cannot run, naming the key", "[offload][job]") {
  Job job = p4d_job("gpt2-small", 1, 16);
  job.parallel.offload_parameters = true;
  job.parallel.offload_optimizer = true;
  JobViolation v = check_job(job);
  CHECK(v.key == "parallel.offload_parameters");
  CHECK_THAT(v.reason, Catch::Contains("sharded_data_parallel_degree"));

  job.parallel.sharded_data_parallel_degree = 8;
  job.parallel.offload_optimizer = false;
  v = check_job(job);
  CHECK(v.key == "parallel.offload_parameters");
  CHECK_THAT(v.reason, Catch::Contains("offload_optimizer"));

  job.parallel.offload_parameters = false;
  job.parallel.offload_optimizer = true;
  job.cluster.instance.host_memory_bw = 0;
  v = check_job(job);
  CHECK(v.key == "parallel.offload_optimizer");
  CHECK_THAT(v.reason, Catch::Contains("host.memory_bw_GBps"));
}

TEST_CASE("fp32 ZeRO-1 offload keeps the slice's weights and reduced gradient on the device", "[offload][memory]") {
  Job base = p4d_job("gpt2-small", 1, 16);
  base.training.precision = Precision::fp32;
  base.parallel.shard_optimizer_state = true;  // dp 8
  Job opt = base;
  opt.parallel.offload_optimizer = true;
  const MemoryBreakdown b = stage_memory(base, 0), o = stage_memory(opt, 0);
  // On the device: the 1/8 slice's fp32 weights and reduced gradient (8 B per parameter);
  // Adam's two fp32 moments of the slice (8 B) go to the host.
  CHECK(o.optimizer_states == Approx(kParams * 8 / 8));
  CHECK(o.host_offload - b.host_offload == Approx(kParams * 8 / 8));
  CHECK(b.optimizer_states == Approx(kParams * 16 / 8));
}

TEST_CASE("with the head on stage 0, its own gather's shard comes from the host too", "[offload][program]") {
  Job job = p4d_job("gpt2-small", 1, 16);
  job.parallel.pipeline_parallel_degree = 2;  // 6 layers a stage, dp 4 sharded over 4
  job.parallel.microbatches = 2;
  job.parallel.sharded_data_parallel_degree = 4;
  job.parallel.lm_head_stage = LmHeadStage::first;
  job.parallel.offload_optimizer = true;
  job.parallel.offload_parameters = true;
  require_valid(job);
  // Stage 0, per micro-batch: each of its 6 layers gathered twice, and the embedding with
  // the head once more for the head's forward and backward.
  const Copies c = copies(build_program(job, 0));
  CHECK(c.up == 2 * (2 * 6 + 1));
  CHECK(c.down == 1);
}
