// Sharded data parallelism per flavour (sharding.hpp): the collectives of one step,
// counted from the per-rank programs and checked against each system's rule written out
// by hand for GPT-2 small (h 768, f 3072, s 1024, vocab 50257, tied), 12 layers, one
// p4d node (8 GPUs), sharded groups of 4 (two replicas), 2 micro-batches, fp16.
//
// The layer's parameter tensors (weight + bias):
//   qkv         768 x 2304 + 2304 = 1,771,776
//   projection  768 x 768  +  768 =   590,592
//   fc1         768 x 3072 + 3072 = 2,362,368
//   fc2         3072 x 768 +  768 = 2,360,064
//   2 norms     2 x (768 + 768)   =     3,072      (sum 7,087,872)
// embedding (token + positions) 50257 x 768 + 1024 x 768 = 39,383,808; head: final norm 1,536.
//
//   smp    persistence 1e6: units qkv, fc1, fc2 (3 calls, 6,494,208); projection and norms
//          stay whole (593,664). Reduce bucket 5e8 > a layer: one call of 7,087,872.
//   zero3  persistence 1e5: units qkv, projection, fc1, fc2 (4 calls, 7,084,800).
//   fsdp   the layer is one flat parameter: 1 call of 7,087,872, reduce-scatter 1 call.
// Per micro-batch every layer is gathered twice (forward, backward) and reduce-scattered
// once; the embedding travels with layer 0 and the head with layer 11, one call each.
#include <catch2/catch.hpp>

#include <set>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/costmodel/sharding.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

constexpr double kLayer = 7087872.0, kEmbedding = 39383808.0, kHead = 1536.0;

Job sharded_job(ShardingFlavor flavor) {
  Job j = p4d_job("gpt2-small", 1, 16);
  j.parallel.microbatches = 2;
  j.parallel.sharded_data_parallel_degree = 4;
  j.parallel.sharding_flavor = flavor;
  return j;
}

ShardingPlan plan_of(const Job& job) {
  return sharding_plan(job, transformer_layer_plan(job.model, plan_config(job)));
}

struct Counted {
  int gather_instructions = 0, gather_calls = 0, reduce_instructions = 0, reduce_calls = 0, replica = 0;
  double gathered = 0, reduced = 0, replica_bytes = 0;
};

Counted count(const RankProgram& prog) {
  Counted c;
  for (const Instruction& in : prog.ops) {
    if (in.group == CommGroup::sharded && in.kind == OpKind::all_gather)
      ++c.gather_instructions, c.gather_calls += in.count, c.gathered += in.bytes * in.count;
    if (in.group == CommGroup::sharded && in.kind == OpKind::reduce_scatter)
      ++c.reduce_instructions, c.reduce_calls += in.count, c.reduced += in.bytes * in.count;
    if (in.group == CommGroup::replica) ++c.replica, c.replica_bytes += in.bytes * in.count;
  }
  return c;
}

}  // namespace

TEST_CASE("each sharding flavour's collectives of one step, by hand", "[sharding][program]") {
  struct Rule {
    ShardingFlavor flavor;
    int units;
    double gathered;  // elements of one layer's gather
  };
  for (const Rule r : {Rule{ShardingFlavor::smp, 3, 6494208.0}, Rule{ShardingFlavor::zero3, 4, 7084800.0},
                       Rule{ShardingFlavor::fsdp, 1, kLayer}}) {
    const Job job = sharded_job(r.flavor);
    require_valid(job);
    INFO("flavour " << to_string(r.flavor));
    for (const RankProgram& prog : build_programs(job)) {
      const Counted c = count(prog);
      INFO("rank " << prog.rank);
      // 2 micro-batches x 2 passes x 12 layers; each layer's units, plus one call each for
      // the embedding and the head.
      CHECK(c.gather_instructions == 2 * 2 * 12);
      CHECK(c.gather_calls == 2 * 2 * (12 * r.units + 2));
      CHECK(c.gathered == Approx(2 * 2 * (12 * r.gathered + kEmbedding + kHead) * 2).epsilon(1e-12));
      // One reduce-scatter per layer and micro-batch (one call: every layer is under the
      // 5e8-element bucket), all of its parameters; the embedding and head one call more.
      CHECK(c.reduce_instructions == 2 * 12);
      CHECK(c.reduce_calls == 2 * (12 + 2));
      CHECK(c.reduced == Approx(2 * (12 * kLayer + kEmbedding + kHead) * 2).epsilon(1e-12));
      // dp 8 = two sharded groups of 4: the shard's gradients all-reduced across the two
      // replicas once, at the end of the step (MiCS's second hop).
      CHECK(c.replica == 1);
      CHECK(c.replica_bytes == Approx((12 * kLayer + kEmbedding + kHead) / 4 * 2).epsilon(1e-12));
    }
  }
}

TEST_CASE("reduce-scatter calls follow the reduce bucket, persistence follows the threshold",
          "[sharding]") {
  Job job = sharded_job(ShardingFlavor::zero3);
  job.parallel.sharding.reduce_bucket_size = 3e6;  // ceil(7,087,872 / 3e6) = 3 calls a layer
  job.parallel.sharding.param_persistence_threshold = 2e6;  // only fc1 and fc2 are gathered
  const ShardingPlan plan = plan_of(job);
  CHECK(plan.reduce_calls == 3);
  CHECK(plan.reduce_elements == Approx(kLayer / 3));
  CHECK(plan.gather_calls() == 2);
  CHECK(plan.gathered == Approx(2362368.0 + 2360064.0));
  CHECK(plan.persistent == Approx(1771776.0 + 590592.0 + 3072.0));
  const Counted c = count(build_program(job, 0));
  CHECK(c.reduce_calls == 2 * (12 * 3 + 2));
}

TEST_CASE("gathered parameters in memory: the unit in use and those prefetched", "[sharding][memory]") {
  // SMP (prefetch bucket 5e7 elements, more than a whole layer here): a unit in use plus
  // every unit of the next layer's window within the bucket; ZeRO-3 likewise; FSDP two
  // flat layers. Persistent tensors are whole on every rank, each layer's.
  const double smp_units[] = {1771776.0, 2362368.0, 2360064.0};
  // In use: fc2 (2,360,064); ahead within 5e7: qkv, fc1 of the next layer and fc2 again
  // (the window wraps around the layer: every unit fits in the bucket).
  const double smp_live = 2362368.0 + (smp_units[0] + smp_units[1] + smp_units[2]);
  CHECK(plan_of(sharded_job(ShardingFlavor::smp)).live_gathered() == Approx(smp_live));
  CHECK(plan_of(sharded_job(ShardingFlavor::fsdp)).live_gathered() == Approx(2 * kLayer));
  Job small_bucket = sharded_job(ShardingFlavor::zero3);
  small_bucket.parallel.sharding.prefetch_bucket_size = 1;  // at least the next unit is fetched
  // Largest pair (unit in use, next unit) in forward order qkv, projection, fc1, fc2:
  // fc1 + fc2 = 4,722,432.
  CHECK(plan_of(small_bucket).live_gathered() == Approx(2362368.0 + 2360064.0));
  // Stage 0 also gathers the embedding (one unit) whole, with the first layer's qkv
  // ahead of it: 39,383,808 + 1,771,776 = 41,155,584 elements, more than a layer's window.
  const MemoryBreakdown m = stage_memory(sharded_job(ShardingFlavor::smp), 0);
  CHECK(m.gathered_parameters == Approx((41155584.0 + 12 * 593664.0) * 2));
  // Gradients awaiting their reduce-scatter: the embedding's whole gradient (39,383,808),
  // more than two reduce buckets of one layer each (2 x 7,087,872); fp16.
  CHECK(m.communication_buffers == Approx(kEmbedding * 2));
  Job untied = sharded_job(ShardingFlavor::fsdp);
  untied.model.vocab = 128;  // embedding 128 x 768 + 1024 x 768 = 884,736 < 2 layers
  CHECK(stage_memory(untied, 0).communication_buffers == Approx(2 * kLayer * 2));
}

TEST_CASE("SMP's all-gather is hierarchical, ZeRO-3's and FSDP's a flat ring", "[sharding]") {
  CHECK(collective_algorithm(sharded_job(ShardingFlavor::smp).parallel, CommGroup::sharded, OpKind::all_gather) ==
        CollectiveAlgorithm::hierarchical);
  CHECK(collective_algorithm(sharded_job(ShardingFlavor::zero3).parallel, CommGroup::sharded,
                             OpKind::all_gather) == CollectiveAlgorithm::ring);
  CHECK(collective_algorithm(sharded_job(ShardingFlavor::fsdp).parallel, CommGroup::sharded,
                             OpKind::all_gather) == CollectiveAlgorithm::ring);
  Job smddp = sharded_job(ShardingFlavor::smp);
  smddp.parallel.sharded_collective = CollectiveAlgorithm::all_to_all;
  CHECK(collective_algorithm(smddp.parallel, CommGroup::sharded, OpKind::all_gather) ==
        CollectiveAlgorithm::all_to_all);
  CHECK(collective_algorithm(smddp.parallel, CommGroup::sharded, OpKind::reduce_scatter) ==
        CollectiveAlgorithm::ring);
}

TEST_CASE("FSDP's backward_prefetch orders the next gather around the gradient kernels", "[sharding][program]") {
  // pre: the next layer's gather is issued before this layer's backward kernels;
  // post: right after them; none: only when the next layer is reached (then awaited).
  for (const BackwardPrefetch bp : {BackwardPrefetch::pre, BackwardPrefetch::post, BackwardPrefetch::none}) {
    Job job = sharded_job(ShardingFlavor::fsdp);
    job.parallel.sharding.backward_prefetch = bp;
    const RankProgram prog = build_program(job, 0);
    INFO("backward_prefetch " << to_string(bp));
    const auto& ops = prog.ops;
    int checked = 0;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Instruction& in = ops[i];
      if (in.kind != OpKind::all_gather || in.group != CommGroup::sharded) continue;
      // A gather of backward: issued after the micro-batch's first backward kernel or the
      // head-side layer (11) of that micro-batch's backward.
      int previous_compute = -1;
      for (int j = i - 1; j >= 0; --j)
        if (is_compute(ops[j].kind)) { previous_compute = j; break; }
      if (previous_compute < 0 || ops[previous_compute].kind != OpKind::backward) continue;
      const Instruction& before = ops[previous_compute];
      if (before.microbatch != in.microbatch) continue;
      ++checked;
      // With pre, the gather of layer l - 1 comes before layer l's kernels, so the compute
      // just before it is layer l + 1's backward; with post and none, layer l's itself.
      CHECK(before.layer == in.layer + (bp == BackwardPrefetch::pre ? 2 : 1));
      // none: the gather is awaited at once (nothing runs beside it).
      if (bp == BackwardPrefetch::none) {
        REQUIRE(i + 1 < static_cast<int>(ops.size()));
        CHECK((ops[i + 1].kind == OpKind::wait && ops[i + 1].wait_for == i));
      }
    }
    CHECK(checked > 0);
  }
}

TEST_CASE("a sharding knob the flavour does not have is refused, naming it", "[sharding][job]") {
  Job fsdp = sharded_job(ShardingFlavor::fsdp);
  fsdp.parallel.sharding.reduce_bucket_size = 1e6;
  const JobViolation v = check_job(fsdp);
  CHECK(v.key == "parallel.sharding.reduce_bucket_size");
  CHECK(v.reason.find("fsdp") != std::string::npos);
  Job zero3 = sharded_job(ShardingFlavor::zero3);
  zero3.parallel.sharding.backward_prefetch = BackwardPrefetch::post;
  CHECK(check_job(zero3).key == "parallel.sharding.backward_prefetch");
  zero3.parallel.sharding.backward_prefetch = BackwardPrefetch::pre;
  zero3.parallel.sharding.reduce_bucket_size = 1e6;
  CHECK_FALSE(check_job(zero3));
}

// FSDP2's copies on the compute stream, written out for GPT-2 small's layer (7,087,872
// parameters, fp16: 2 bytes a parameter and a gradient) on the p4d A100 profile: after a
// gather, split_with_sizes_copy reads and writes the layer (4 x 7,087,872 bytes); before
// the reduce-scatter, chunk_cat reads the gradients and writes them in the reduce format
// (2 + 2 bytes an element here; 2 + 4 with grad_reduce_in_fp32). One kernel each, at the
// profile's copy rate.
TEST_CASE("fsdp2 adds its copies to each layer's kernels, by hand", "[sharding][program]") {
  const Job flat = sharded_job(ShardingFlavor::fsdp);
  Job fsdp2 = sharded_job(ShardingFlavor::fsdp2);
  require_valid(fsdp2);
  const GpuProfile& gpu = fsdp2.cluster.instance.gpu;
  const double rate = gpu.hbm_bw * (gpu.copy_efficiency > 0 ? gpu.copy_efficiency : gpu.hbm_efficiency);
  const double copy_out = 4 * kLayer / rate + gpu.kernel_overhead;
  const double copy_in = (2 + 2) * kLayer / rate + gpu.kernel_overhead;
  auto seconds = [](const RankProgram& p, OpKind kind, int mb, int layer) {
    for (const Instruction& in : p.ops)
      if (in.kind == kind && in.microbatch == mb && in.layer == layer) return in.seconds;
    FAIL("no such instruction");
    return 0.0;
  };
  const RankProgram a = build_program(flat, 0), b = build_program(fsdp2, 0);
  // Layer 5: no embedding or head beside it.
  CHECK(seconds(b, OpKind::forward, 0, 5) - seconds(a, OpKind::forward, 0, 5) == Approx(copy_out).epsilon(1e-9));
  CHECK(seconds(b, OpKind::backward, 1, 5) - seconds(a, OpKind::backward, 1, 5) ==
        Approx(copy_out + copy_in).epsilon(1e-9));
  // Gathers and reduce-scatters themselves are FSDP's.
  CHECK(count(a).gathered == count(b).gathered);
  CHECK(count(a).reduced == count(b).reduced);
  // The estimator adds at least the copies of every layer, micro-batch by micro-batch.
  const double layers = 12, microbatches = 2;
  const double grown = estimate(fsdp2).step_time - estimate(flat).step_time;
  CHECK(grown >= layers * microbatches * (2 * copy_out + copy_in) * (1 - 1e-9));
  // Off by the knob; on for the other flavours by it.
  fsdp2.parallel.sharding.gather_copies = 0;
  CHECK(estimate(fsdp2).step_time == Approx(estimate(flat).step_time).epsilon(1e-12));
  Job zero3 = sharded_job(ShardingFlavor::zero3);
  const double before = estimate(zero3).step_time;
  zero3.parallel.sharding.gather_copies = 1;
  CHECK(estimate(zero3).step_time > before);
}

TEST_CASE("a written job keeps its sharding flavour and gather_copies", "[sharding][job]") {
  for (int copies : {-1, 0, 1}) {
    Job j = sharded_job(ShardingFlavor::fsdp2);
    j.parallel.sharding.gather_copies = copies;
    const Job back = parse_job(job_yaml(j, "a test"), "written.yaml");
    INFO("gather_copies " << copies);
    CHECK(back.parallel.sharding_flavor == ShardingFlavor::fsdp2);
    CHECK(back.parallel.sharding.gather_copies == copies);
  }
}
