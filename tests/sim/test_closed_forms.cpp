// The discrete-event simulator (sim::simulate) against closed forms on hand-built
// hardware, plus the properties the rest of partune relies on: symmetry is exact,
// simulations are deterministic, and trace events carry the programs' instruction names.
//
// Hand-built instances make the arithmetic exact: every efficiency 1, no kernel launch
// overhead, GEMMs at full peak on every shape (tile 1, one SM, k_half 0), and links that are either
// "free" (1e18 B/s, no latency) or exactly known.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ideal_hardware.hpp"
#include "job_fixtures.hpp"
#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;
using partune::testing::make_model;
using partune::testing::p4d_job;
using partune::testing::require_valid;
using partune::testing::ideal_instance;
using partune::testing::ideal_job;
using partune::testing::kFree;

namespace {

// Pipeline-only job on one node of p GPUs: dp 1, tp 1, b 1, free communication. A tiny
// vocabulary (8) keeps the embedding and LM head negligible, so stages are uniform.
Job pipeline_job(int p, int m, int v, PipelineSchedule sched, int vocab = 8) {
  Job j = ideal_job(make_model(16, 512, 8, 2048, vocab, 128), ideal_instance(p, 1e12), 1, m);
  // Untied: a tied embedding has a copy on the last stage whose gradient is summed with
  // stage 0's at the end of the step (CommGroup::embedding), and the last stage waiting
  // there for stage 0's drain is not part of the bubble formula.
  j.model.tied_embeddings = false;
  j.parallel.pipeline_parallel_degree = p;
  j.parallel.microbatches = m;
  j.parallel.virtual_stages = v;
  j.parallel.pipeline = sched;
  j.parallel.active_microbatches = sched == PipelineSchedule::gpipe ? m : 0;  // GPipe: one window
  return j;
}

sim::SimOptions full_sim() {
  sim::SimOptions o;
  o.use_symmetry = false;
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// a. Pipeline bubble.
TEST_CASE("simulated pipeline bubble matches (p - 1) / (v m + p - 1)", "[sim][bubble]") {
  // Uniform stages, free links: every rank computes m (F + B) and the step is
  // (m + (p - 1) / v)(F + B), so 1 - busy / step = (p - 1) / (v m + p - 1). The first and
  // last stages also run the embedding and a vocab-8 LM head: about 3e-6 s against a
  // stage's ~1e-2 s per micro-batch, i.e. ~3e-4 of a stage, which moves the bubble by at
  // most ~3e-4 absolute (observed <= 1.1e-4) and the step by ~3e-4 relative. Tolerances:
  // bubble 3e-4 absolute (0.5% of the smallest bubble here, 1/17), step 1e-3 relative;
  // both far inside what a wrong schedule would give (p 4, m 8: 3/11 = 0.273 vs 3/12).
  struct Case { int p, m, v; PipelineSchedule sched; };
  const std::vector<Case> cases{
      {2, 4, 1, PipelineSchedule::gpipe},      {4, 8, 1, PipelineSchedule::gpipe},
      {2, 4, 1, PipelineSchedule::one_f_one_b}, {4, 8, 1, PipelineSchedule::one_f_one_b},
      {4, 16, 1, PipelineSchedule::one_f_one_b}, {4, 8, 2, PipelineSchedule::one_f_one_b},
      {2, 4, 4, PipelineSchedule::one_f_one_b}, {8, 8, 2, PipelineSchedule::one_f_one_b}};
  for (const Case& c : cases) {
    const Job job = pipeline_job(c.p, c.m, c.v, c.sched);
    require_valid(job);
    INFO(to_string(c.sched) << " p " << c.p << " m " << c.m << " v " << c.v);
    const sim::SimResult r = sim::simulate(job, full_sim());
    const double expected_bubble = (c.p - 1.0) / (c.v * c.m + c.p - 1.0);
    CHECK(r.bubble_fraction == Approx(expected_bubble).margin(3e-4));
    // The step itself: (m + (p - 1) / v) times one stage's F + B from the cost model.
    const LayerTime lt = layer_time(job.cluster.instance.gpu, job.model, Precision::fp16, 1, 1, false);
    const double stage = 16.0 / c.p * (lt.forward() + lt.backward());
    CHECK(r.metrics.step_time == Approx((c.m + (c.p - 1.0) / c.v) * stage).epsilon(1e-3));
    // Nothing but the pipeline keeps the ranks waiting.
    for (const sim::RankResult& rr : r.ranks) {
      CHECK(rr.exposed.tensor == 0);
      CHECK(rr.exposed.data == 0);
      CHECK(rr.compute_busy == Approx(c.m * stage).epsilon(1e-3));
    }
  }
}

TEST_CASE("GPipe in windows of active_microbatches: bubble (p - 1) / (a + p - 1)", "[sim][bubble]") {
  // Each window of a micro-batches fills and drains the pipeline on its own.
  const int p = 4, m = 8;
  for (int a : {1, 2, 4}) {
    Job job = pipeline_job(p, m, 1, PipelineSchedule::gpipe);
    job.parallel.active_microbatches = a;
    INFO("active " << a);
    const sim::SimResult r = sim::simulate(job, full_sim());
    CHECK(r.bubble_fraction == Approx((p - 1.0) / (a + p - 1.0)).margin(3e-4));
  }
}

// ---------------------------------------------------------------------------------------
// b. Ring all-reduce inside a node.
TEST_CASE("data-parallel ring all-reduce in a node: 2(n-1)/n S/B + 2(n-1) alpha per bucket", "[sim][collective]") {
  // dp = n on one node, tp = pp = 1, one micro-batch. GPU peak and HBM are effectively
  // infinite, so the step is the gradient synchronisation alone: one all-reduce bucket per
  // layer, back to back on the data stream, each paying 2(n-1)/n S_l / B + 2(n-1) alpha.
  // NVSwitch: 50 GB/s at efficiency 0.8 -> B = 40 GB/s per GPU, alpha = 5 us.
  // Model: 4 layers, h 1024, vocab 64, s 128:
  //   layer parameters 12 h^2 + 13 h = 12,596,224; embedding (64 + 128) h = 196,608;
  //   final norm 2 h = 2,048; total 50,583,552 parameters = 101,167,104 bytes in fp16.
  // Tolerance 1e-6 relative or 1e-8 s: the compute left is ~1e-10 s, and SimGrid ends
  // each activity to within ~1e-9 s (observed differences ~2e-9 s on ~3 ms).
  const double B = 40e9, alpha = 5e-6, S = 101167104.0, buckets = 4;
  const int n = GENERATE(2, 4, 8);
  InstanceType inst = ideal_instance(n, 1e20);
  inst.intra_node = {50e9, alpha, 0.8};
  Job job = ideal_job(make_model(4, 1024, 16, 4096, 64, 128), inst, 1, n);
  require_valid(job);
  REQUIRE(job.data_parallel_degree() == n);
  REQUIRE_FALSE(sim::replicas_are_symmetric(job));  // replicas share the node
  INFO("n " << n);
  const sim::SimResult r = sim::simulate(job);
  CHECK_FALSE(r.symmetric);
  REQUIRE(r.ranks.size() == static_cast<std::size_t>(n));
  const double expected = 2.0 * (n - 1) / n * S / B + buckets * 2.0 * (n - 1) * alpha;
  CHECK(r.metrics.step_time == Approx(expected).epsilon(1e-6).margin(1e-8));
  for (const sim::RankResult& rr : r.ranks) {
    CHECK(rr.end_time == Approx(expected).epsilon(1e-6).margin(1e-8));
    CHECK(rr.exposed.data == Approx(expected).epsilon(1e-6).margin(1e-8));  // all of it is exposed
    CHECK(rr.compute_busy < 1e-6 * expected);
  }
  CHECK(r.metrics.breakdown.data_parallel_exposed == Approx(expected).epsilon(1e-6).margin(1e-8));
}

TEST_CASE("data-parallel ring all-reduce across nodes runs at the NIC", "[sim][collective]") {
  // Two nodes of one GPU each: the ring crosses the network, so per member
  // 2(n-1)/n S / (nic bw x nic efficiency x ring efficiency) + 2(n-1) alpha_nic per bucket,
  // n = 2. NIC 10 GB/s x 0.8 x ring 0.5 = 4 GB/s, alpha 20 us. Symmetric (each replica
  // has a node): simulating one replica against its mirror must give the same time.
  const double bw = 10e9 * 0.8 * 0.5, alpha = 20e-6, S = 101167104.0, buckets = 4;
  InstanceType inst = ideal_instance(1, 1e20);
  inst.nic = {10e9, alpha, 0.8};
  inst.ring.net_efficiency = 0.5;
  Job job = ideal_job(make_model(4, 1024, 16, 4096, 64, 128), inst, 2, 2);
  require_valid(job);
  REQUIRE(sim::replicas_are_symmetric(job));
  const double expected = 2.0 * 1 / 2 * S / bw + buckets * 2.0 * 1 * alpha;
  for (bool symmetry : {true, false}) {
    sim::SimOptions o;
    o.use_symmetry = symmetry;
    const sim::SimResult r = sim::simulate(job, o);
    INFO("use_symmetry " << symmetry);
    CHECK(r.symmetric == symmetry);
    CHECK(r.ranks.size() == (symmetry ? 1u : 2u));
    CHECK(r.metrics.step_time == Approx(expected).epsilon(1e-6).margin(1e-8));
  }
}

// ---------------------------------------------------------------------------------------
// c. Two GPUs behind one NIC.
namespace {
// Two nodes of two GPUs, pipeline 2 with placement "PDT" (stage slowest): stage 0 is
// node 0 (ranks 0, 1 = replicas 0, 1), stage 1 is node 1 (ranks 2, 3). Each micro-batch's
// activation (forward) and gradient (backward) crosses the network; with one NIC per
// node both replicas' transfers share it. Compute is free, so
//   step = 2 (k S / B_nic) + 2 alpha,   k = GPUs sending through one NIC at once,
// with S = b s h x 2 bytes = 1 x 1024 x 1024 x 2 = 2,097,152, B_nic = 1 GB/s,
// alpha = 10 us (each receive waits one network hop). The data-parallel all-reduce runs
// inside a node over free NVSwitch links. Tolerance as in the all-reduce test above.
constexpr double kActivation = 2097152.0, kNicBw = 1e9, kNicLatency = 10e-6;

Job nic_job(int gpus_per_node, int nics_per_node) {
  InstanceType inst = ideal_instance(gpus_per_node, 1e20);
  inst.nics_per_node = nics_per_node;
  inst.nic = {kNicBw, kNicLatency, 1.0};
  Job j = ideal_job(make_model(2, 1024, 16, 4096, 64, 1024), inst, 2, gpus_per_node);
  j.model.tied_embeddings = false;  // no embedding-group all-reduce: see the test after this one
  j.parallel.pipeline_parallel_degree = 2;
  j.parallel.microbatches = 1;
  j.parallel.placement_strategy = PlacementOrder::parse("PDT");
  return j;
}
}  // namespace

TEST_CASE("a tied embedding over two pipeline ends adds one embedding-group all-reduce", "[sim][network]") {
  // Pipeline 2 across two nodes, one replica, free compute: tying the embedding keeps a
  // copy on the last stage and sums the two copies' gradients over the network once per
  // step, after the pipeline's two transfers. The step grows by exactly that collective:
  // a 2-member ring all-reduce of vocab x hidden x 2 bytes between the nodes.
  Job untied = nic_job(1, 1);
  Job tied = untied;
  tied.model.tied_embeddings = true;
  require_valid(tied);
  const double bytes = 64.0 * 1024 * 2;
  const double collective = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, bytes,
                                            GroupSpan{2, 2, 1}, tied.cluster.instance, 1.0)
                                .total();
  const double grown = sim::simulate(tied).metrics.step_time - sim::simulate(untied).metrics.step_time;
  CHECK(grown == Approx(collective).epsilon(0.02));
  CHECK(grown > 0.9 * bytes / kNicBw);  // the 128 KiB did cross the 1 GB/s NIC
  // Only the first and last stage hold a copy: their programs carry the collective.
  for (int rank = 0; rank < tied.world_size(); ++rank) {
    const RankProgram prog = build_program(tied, rank);
    int n = 0;
    for (const Instruction& in : prog.ops) n += in.group == CommGroup::embedding ? 1 : 0;
    CHECK(n == 1);  // both ranks are an end of the 2-stage pipeline
  }
}

TEST_CASE("two GPUs sending through one NIC take twice as long as one", "[sim][network]") {
  const Job shared = nic_job(2, 1);  // gpus_per_nic 2: replicas 0 and 1 share NIC 0
  const Job own = nic_job(2, 2);     // gpus_per_nic 1: the same job, a NIC per GPU
  const Job single = nic_job(1, 1);  // one replica only (dp 1): nothing to share with
  for (const Job* j : {&shared, &own, &single}) require_valid(*j);
  REQUIRE(shared.cluster.instance.gpus_per_nic() == 2);
  REQUIRE(own.cluster.instance.gpus_per_nic() == 1);
  REQUIRE(shared.data_parallel_degree() == 2);
  REQUIRE(single.data_parallel_degree() == 1);

  const sim::SimResult rs = sim::simulate(shared), ro = sim::simulate(own), r1 = sim::simulate(single);
  const double one = kActivation / kNicBw;  // 2.097 ms
  CHECK(rs.metrics.step_time == Approx(2 * 2 * one + 2 * kNicLatency).epsilon(1e-6).margin(1e-8));
  CHECK(ro.metrics.step_time == Approx(2 * one + 2 * kNicLatency).epsilon(1e-6).margin(1e-8));
  CHECK(r1.metrics.step_time == Approx(2 * one + 2 * kNicLatency).epsilon(1e-6).margin(1e-8));
  // The transfer part alone doubles.
  CHECK((rs.metrics.step_time - 2 * kNicLatency) / (ro.metrics.step_time - 2 * kNicLatency) ==
        Approx(2.0).epsilon(1e-5));
  // Stage 1 waited for the activation (k S / B + alpha) and for its gradient send (k S / B).
  for (const auto& [res, k] : {std::make_pair(&rs, 2.0), std::make_pair(&ro, 1.0)}) {
    for (const sim::RankResult& rr : res->ranks) {
      INFO("k " << k << " rank " << rr.rank << " stage " << rr.stage);
      if (rr.stage == 1) CHECK(rr.exposed.pipeline == Approx(2 * k * one + kNicLatency).epsilon(1e-6).margin(1e-8));
      else CHECK(rr.exposed.pipeline == Approx(2 * k * one + 2 * kNicLatency).epsilon(1e-6).margin(1e-8));
    }
  }
}

// ---------------------------------------------------------------------------------------
// d. Activations held on the first stage.
TEST_CASE("stage 0 peak memory: 1F1B holds p micro-batches, GPipe m, interleaved p + (p-1)/v", "[sim][memory]") {
  // Per layer and micro-batch (b 1, s 128, h 512, a 8, t 1, no checkpointing, fp16),
  // Korthikanti: s b h (34 + 5 a s / h) = 65,536 x 44 = 2,883,584 bytes.
  const double per_layer = 2883584.0;
  const int p = 4, m = 8;
  const Job f1b = pipeline_job(p, m, 1, PipelineSchedule::one_f_one_b);
  const Job gpipe = pipeline_job(p, m, 1, PipelineSchedule::gpipe);
  const Job inter = pipeline_job(p, m, 2, PipelineSchedule::one_f_one_b);
  REQUIRE(stored_layer_bytes(f1b, 1) == per_layer);
  const MemoryBreakdown mb = stage_memory(f1b, 0);
  const double static_bytes = mb.parameters + mb.gradients + mb.optimizer_states + mb.gathered_parameters +
                              mb.communication_buffers + mb.reserved;
  auto stage0_peak = [](const sim::SimResult& r) {
    for (const sim::RankResult& rr : r.ranks)
      if (rr.stage == 0) return rr.peak_memory;
    FAIL("no stage 0 rank");
    return 0.0;
  };
  const double pf = stage0_peak(sim::simulate(f1b, full_sim()));
  const double pg = stage0_peak(sim::simulate(gpipe, full_sim()));
  const double pi = stage0_peak(sim::simulate(inter, full_sim()));
  const double layers_per_stage = 16.0 / p;
  CHECK(pf - static_bytes == Approx(p * layers_per_stage * per_layer).epsilon(1e-9));
  CHECK(pg - static_bytes == Approx(m * layers_per_stage * per_layer).epsilon(1e-9));
  // 11 chunks of 2 layers = 5.5 stages' worth.
  CHECK(pi - static_bytes == Approx((p + (p - 1.0) / 2) * layers_per_stage * per_layer).epsilon(1e-9));
  CHECK(pg - pf == Approx((m - p) * layers_per_stage * per_layer).epsilon(1e-9));
}

TEST_CASE("interleaved: only the last model chunk holds logits on the last stage", "[sim][memory]") {
  // p 2, v 2, m 4, 4 layers (one per chunk), vocab 50,000. The last rank holds chunks
  // 0 (model stage 1) and 1 (model stage 3, the LM head). Its schedule
  //   F(0,c0) F(1,c0) F(0,c1) B(0,c1) F(1,c1) B(1,c1) F(2,c0) B(0,c0) ...
  // peaks at 3 chunks in flight, one of them chunk 1: 3 x 2,883,584 activation bytes plus
  // one micro-batch of logits, 6 b s V / t = 6 x 128 x 50,000 = 38,400,000 bytes.
  // world.cpp adds the logits on every forward of the last pipeline rank, chunk 0 too.
  Job job = pipeline_job(2, 4, 2, PipelineSchedule::one_f_one_b, 50000);
  job.model.layers = 4;
  require_valid(job);
  const MemoryBreakdown last = stage_memory(job, 1);
  REQUIRE(last.logits == 38400000.0);
  const double static_bytes = last.parameters + last.gradients + last.optimizer_states +
                              last.gathered_parameters + last.communication_buffers + last.reserved;
  const sim::SimResult r = sim::simulate(job, full_sim());
  for (const sim::RankResult& rr : r.ranks)
    if (rr.stage == 1) CHECK(rr.peak_memory - static_bytes == Approx(3 * 2883584.0 + 38400000.0).epsilon(1e-9));
}

TEST_CASE("offloaded activations leave the GPU in the simulated peak memory", "[sim][memory]") {
  // 1F1B, p 4, m 8, full checkpointing: stage 0 keeps 4 micro-batches x 4 layers of layer
  // inputs, 2 s b h = 131,072 bytes each. With offload_activations they are copied to host
  // memory (over free PCIe links here) and come back one backward ahead, so the stage's
  // device peak must drop. The programs move whole chunks (4 layers here), so at the peak
  // the device holds at most the chunk being offloaded and the chunk reloaded for the next
  // backward: 8 of the 16 layers (memory.cpp's layer-by-layer horizon keeps 5).
  Job plain = pipeline_job(4, 8, 1, PipelineSchedule::one_f_one_b);
  plain.parallel.activation_checkpointing = Checkpointing::full;
  Job offload = plain;
  offload.parallel.offload_activations = true;
  require_valid(offload);
  REQUIRE(stored_layer_bytes(plain, 1) == 131072.0);
  REQUIRE(stage_memory(offload, 0).activations == 5 * 131072.0);
  REQUIRE(stage_memory(plain, 0).activations == 16 * 131072.0);
  auto stage0 = [](const sim::SimResult& r) {
    for (const sim::RankResult& rr : r.ranks)
      if (rr.stage == 0) return rr.peak_memory;
    return 0.0;
  };
  const double with = stage0(sim::simulate(offload, full_sim())), without = stage0(sim::simulate(plain, full_sim()));
  REQUIRE(without > 0);
  // At least the other 8 layers must be off the device.
  CHECK(without - with >= 8 * 131072.0);
}

// ---------------------------------------------------------------------------------------
// e. Symmetry.
namespace {
struct SymCase {
  std::string name;
  int layers, nodes, pp, tp, micro, v;
  PipelineSchedule sched;
  Checkpointing ckpt;
  bool shard_optimizer;
  CollectiveAlgorithm dp_algo;
};

Job sym_job(const SymCase& c) {
  // Cluster placement puts each replica on its own node(s) (pp x tp a multiple of 8).
  Job j = p4d_job("gpt2-small", c.nodes, c.nodes * 8 / (c.pp * c.tp) * c.micro);
  j.model.layers = c.layers;
  j.parallel.pipeline_parallel_degree = c.pp;
  j.parallel.tensor_parallel_degree = c.tp;
  j.parallel.microbatches = c.micro;
  j.parallel.virtual_stages = c.v;
  j.parallel.pipeline = c.sched;
  j.parallel.activation_checkpointing = c.ckpt;
  j.parallel.shard_optimizer_state = c.shard_optimizer;
  j.parallel.data_parallel_collective = c.dp_algo;
  return j;
}

std::vector<SymCase> sym_cases() {
  using PS = PipelineSchedule;
  using CK = Checkpointing;
  using CA = CollectiveAlgorithm;
  return {
      {"2 nodes pp2 tp4 1F1B", 12, 2, 2, 4, 4, 1, PS::one_f_one_b, CK::none, false, CA::ring},
      {"4 nodes pp4 tp2 interleaved v3", 12, 4, 4, 2, 4, 3, PS::one_f_one_b, CK::selective, false, CA::ring},
      {"2 nodes pp8 tp1, 16 layers", 16, 2, 8, 1, 8, 1, PS::one_f_one_b, CK::full, false, CA::ring},
      {"3 nodes pp2 tp4 GPipe, sharded optimizer", 12, 3, 2, 4, 4, 1, PS::gpipe, CK::none, true, CA::ring},
      {"2 nodes pp4 tp2 tree all-reduce", 12, 2, 4, 2, 4, 1, PS::one_f_one_b, CK::none, false, CA::tree},
      {"4 nodes pp2 tp4 hierarchical", 12, 4, 2, 4, 2, 1, PS::one_f_one_b, CK::none, false, CA::hierarchical},
      // A replica spans two nodes (pp 4 x tp 4 = 16 GPUs): pipeline transfers cross the
      // network too, and share each NIC's receive side with the mirrored gradient traffic.
      {"4 nodes pp4 tp4, replicas of two nodes", 12, 4, 4, 4, 4, 1, PS::one_f_one_b, CK::none, false, CA::ring},
      {"4 nodes pp8 tp2 interleaved v2, replicas of two nodes", 16, 4, 8, 2, 8, 2, PS::one_f_one_b, CK::none, false,
       CA::ring},
  };
}
}  // namespace

TEST_CASE("symmetry: one replica stands for all when replicas sit on disjoint nodes", "[sim][symmetry]") {
  for (const SymCase& c : sym_cases()) {
    const Job job = sym_job(c);
    require_valid(job);
    INFO(c.name);
    REQUIRE(sim::replicas_are_symmetric(job));
    sim::SimOptions with, without;
    with.use_symmetry = true;
    without.use_symmetry = false;
    const sim::SimResult a = sim::simulate(job, with), b = sim::simulate(job, without);
    CHECK(a.symmetric);
    CHECK_FALSE(b.symmetric);
    // One replica, and one rank per tensor-parallel group when the group sits in a node.
    const std::size_t per_replica = c.pp * (sim::tensor_groups_are_symmetric(job) ? 1 : c.tp);
    CHECK(a.ranks.size() == per_replica);
    CHECK(b.ranks.size() == static_cast<std::size_t>(job.world_size()));
    CHECK(a.metrics.step_time == Approx(b.metrics.step_time).epsilon(1e-6).margin(1e-8));
    CHECK(a.bubble_fraction == Approx(b.bubble_fraction).epsilon(1e-6).margin(1e-8));
    // The data-parallel synchronisation really crosses the network here.
    CHECK(b.metrics.breakdown.data_parallel_exposed > 0);
    CHECK(a.metrics.breakdown.data_parallel_exposed ==
          Approx(b.metrics.breakdown.data_parallel_exposed).epsilon(1e-6).margin(1e-8));
  }
}

TEST_CASE("symmetry does not apply when replicas share nodes", "[sim][symmetry]") {
  // 1 node, pp 2 x tp 2 x dp 2: both replicas on node 0.
  Job job = p4d_job("gpt2-small", 1, 8);
  job.parallel.pipeline_parallel_degree = 2;
  job.parallel.tensor_parallel_degree = 2;
  job.parallel.microbatches = 2;
  std::string why;
  CHECK_FALSE(sim::replicas_are_symmetric(job, &why));
  CHECK_FALSE(why.empty());
  const sim::SimResult r = sim::simulate(job);  // use_symmetry on by default
  // Both replicas are simulated; only the tensor pairs (inside the node) fold to one rank.
  REQUIRE(sim::tensor_groups_are_symmetric(job));
  CHECK(r.ranks.size() == 4u);
  // One replica has nothing to mirror.
  Job single = p4d_job("gpt2-small", 1, 8);
  single.parallel.pipeline_parallel_degree = 8;
  single.model.layers = 16;
  single.parallel.microbatches = 8;
  CHECK_FALSE(sim::replicas_are_symmetric(single));
}

// ---------------------------------------------------------------------------------------
// f. Determinism.
TEST_CASE("the same job simulates to the same step and the same events", "[sim][determinism]") {
  for (const SymCase& c : {sym_cases()[1], sym_cases()[3]}) {
    const Job job = sym_job(c);
    INFO(c.name);
    sim::SimOptions o;
    o.use_symmetry = false;
    o.record_events = true;
    const sim::SimResult a = sim::simulate(job, o), b = sim::simulate(job, o);
    CHECK(a.metrics.step_time == b.metrics.step_time);  // bit for bit
    CHECK(a.activities == b.activities);
    REQUIRE(a.events.size() == b.events.size());
    REQUIRE_FALSE(a.events.empty());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < a.events.size(); ++i) {
      const sim::TraceEvent &x = a.events[i], &y = b.events[i];
      if (std::tie(x.rank, x.stream, x.kind, x.group, x.microbatch, x.chunk, x.layer, x.start, x.end) !=
          std::tie(y.rank, y.stream, y.kind, y.group, y.microbatch, y.chunk, y.layer, y.start, y.end))
        ++differing;
    }
    CHECK(differing == 0);
    REQUIRE(a.ranks.size() == b.ranks.size());
    for (std::size_t i = 0; i < a.ranks.size(); ++i) {
      CHECK(a.ranks[i].end_time == b.ranks[i].end_time);
      CHECK(a.ranks[i].peak_memory == b.ranks[i].peak_memory);
    }
  }
}

// ---------------------------------------------------------------------------------------
// g. Trace events are the programs' instructions.
TEST_CASE("trace events carry the program's instruction names", "[sim][trace]") {
  struct Case { std::string name; Job job; Granularity gran; };
  std::vector<Case> cases;
  {
    Job j = p4d_job("gpt2-small", 1, 8);  // pp 2 x tp 2 x dp 2, interleaved v 2
    j.parallel.pipeline_parallel_degree = 2;
    j.parallel.tensor_parallel_degree = 2;
    j.parallel.microbatches = 4;
    j.parallel.virtual_stages = 2;
    cases.push_back({"pp2 tp2 dp2 v2, chunk", j, Granularity::chunk});
    cases.push_back({"pp2 tp2 dp2 v2, layer", j, Granularity::layer});
  }
  {
    Job j = p4d_job("gpt2-small", 1, 16);  // sharded dp 8 in groups of 4, full ckpt offloaded
    j.parallel.microbatches = 2;
    j.parallel.sharded_data_parallel_degree = 4;
    j.parallel.activation_checkpointing = Checkpointing::full;
    j.parallel.offload_activations = true;
    cases.push_back({"sharded dp8 sdp4, offload", j, Granularity::chunk});
  }
  for (const Case& c : cases) {
    require_valid(c.job);
    INFO(c.name);
    sim::SimOptions o;
    o.record_events = true;
    o.use_symmetry = false;
    o.granularity = c.gran;
    const sim::SimResult r = sim::simulate(c.job, o);
    REQUIRE_FALSE(r.events.empty());
    std::set<int> ranks_seen;
    for (int rank = 0; rank < c.job.world_size(); ++rank) {
      const RankProgram prog = build_program(c.job, rank, {c.gran});
      // What the program says, as (kind, group, micro-batch, chunk, layer).
      std::set<std::tuple<OpKind, CommGroup, int, int, int>> instructions;
      std::set<OpKind> kinds;
      int compute = 0, collectives = 0, sync_collectives = 0;
      for (const Instruction& in : prog.ops) {
        if (in.kind == OpKind::wait) continue;
        instructions.insert({in.kind, in.group, in.microbatch, in.chunk, in.layer});
        kinds.insert(in.kind);
        compute += is_compute(in.kind);
        collectives += is_collective(in.kind);
        sync_collectives += is_collective(in.kind) && !in.async;
      }
      int ev_compute = 0, ev_comm_stream = 0, ev_blocked = 0;
      double compute_end = 0;
      for (const sim::TraceEvent& e : r.events) {
        if (e.rank != rank) continue;
        ranks_seen.insert(rank);
        INFO("rank " << rank << " event " << to_string(e.kind) << " mb " << e.microbatch << " chunk " << e.chunk
                     << " layer " << e.layer);
        CHECK(e.kind != OpKind::wait);  // waits are reported as what they waited for
        CHECK(kinds.count(e.kind) == 1);
        CHECK(instructions.count({e.kind, e.group, e.microbatch, e.chunk, e.layer}) == 1);
        CHECK(e.end >= e.start);
        if (is_compute(e.kind)) {
          ++ev_compute;
          CHECK(e.stream == 0);
          CHECK(e.start >= compute_end - 1e-12);  // one kernel at a time
          compute_end = e.end;
        }
        if (is_collective(e.kind)) {
          // On its communicator's stream; a synchronous one also on the compute stream,
          // as the time the program was blocked (docs/architecture.md 5.10).
          CHECK(e.group != CommGroup::none);
          if (e.stream == 0) {
            ++ev_blocked;
          } else {
            CHECK(e.stream == 2 + static_cast<int>(e.group));
            ++ev_comm_stream;
          }
        }
      }
      // Every compute and collective instruction ran exactly once.
      CHECK(ev_compute == compute);
      CHECK(ev_comm_stream == collectives);
      CHECK(ev_blocked == sync_collectives);
    }
    CHECK(ranks_seen.size() == static_cast<std::size_t>(c.job.world_size()));
  }
}

// ---------------------------------------------------------------------------------------
// The simulation runs in a forked child: what the caller had buffered on stdout must not
// be written a second time by the child.
TEST_CASE("simulate() does not replay the caller's buffered stdout", "[sim]") {
  // fork() copies the parent's unflushed stdio buffers into the child; unless they are
  // flushed before the fork, the child writes them again. `partune reproduce --explain A B`
  // piped into a file repeats A's report once per later simulation.
  Job job = pipeline_job(2, 2, 1, PipelineSchedule::one_f_one_b);
  char path[] = "/tmp/partune_test_stdout_XXXXXX";
  const int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  std::cout.flush();
  std::fflush(stdout);
  const int saved = ::dup(1);
  ::dup2(fd, 1);
  std::fputs("partune-marker", stdout);  // no newline: stays in the buffer, line-buffered or not
  sim::SimResult r;
  std::string error;
  try {
    r = sim::simulate(job);
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ::unlink(path);
  REQUIRE(error.empty());
  CHECK(r.metrics.step_time > 0);
  std::size_t count = 0;
  for (std::size_t at = text.find("partune-marker"); at != std::string::npos; at = text.find("partune-marker", at + 1))
    ++count;
  CHECK(count == 1);
}

TEST_CASE("ranks beyond the host's cores share them: 4 data-parallel ranks on 2 cores take twice as long",
          "[sim][host]") {
  // Data parallel 4 on one node, free links: every rank computes the same step alone in
  // T. With a core per rank the step is T; with 2 cores for the 4 ranks (a CPU instance
  // running more ranks than cores) the 4 executions split 2 cores: 2 T. A pipeline of 4
  // on 2 cores is not simply 2x: while the pipeline fills and drains fewer stages compute
  // at once and each gets a whole core, so it lands between T and 2 T.
  auto job = [](int cores, int pipeline) {
    Job j = ideal_job(make_model(8, 512, 8, 2048, 8, 128), ideal_instance(4, 1e12), 1, 8);
    j.model.tied_embeddings = false;
    j.cluster.instance.host_cores = cores;
    j.parallel.pipeline_parallel_degree = pipeline;
    j.parallel.microbatches = pipeline == 1 ? 2 : 8;
    return j;
  };
  for (int cores : {2, 4, 8}) require_valid(job(cores, 1));
  const double alone = sim::simulate(job(4, 1)).metrics.step_time;
  CHECK(job(2, 1).cluster.instance.ranks_share_host_cores());
  CHECK_FALSE(job(4, 1).cluster.instance.ranks_share_host_cores());
  CHECK(sim::simulate(job(8, 1)).metrics.step_time == Approx(alone).epsilon(1e-9));
  CHECK(sim::simulate(job(2, 1)).metrics.step_time == Approx(2 * alone).epsilon(1e-6));
  // Symmetry folding would drop the ranks that contend for the cores: it is off.
  CHECK_FALSE(sim::simulate(job(2, 1)).symmetric);
  const double pipe_alone = sim::simulate(job(4, 4)).metrics.step_time;
  const double pipe_shared = sim::simulate(job(2, 4)).metrics.step_time;
  CHECK(pipe_shared > 1.2 * pipe_alone);
  CHECK(pipe_shared < 2.0 * pipe_alone);
}

TEST_CASE("cores slower when all are busy: host.all_busy_speed scales concurrent compute only", "[sim][host]") {
  // Data parallel 2 on 2 cores, free links: both ranks always compute at once, so with
  // all_busy_speed 0.75 each runs at 0.75 of one core alone: the step takes T / 0.75. One
  // rank on the same host computes alone: T. A pipeline of 2 has a fill and a drain with
  // one stage busy (full speed), so it lands between T and T / 0.75.
  auto job = [](int ranks, double busy, int pipeline) {
    Job j = ideal_job(make_model(8, 512, 8, 2048, 8, 128), ideal_instance(ranks, 1e12), 1, 8);
    j.model.tied_embeddings = false;
    j.cluster.instance.host_cores = 2;
    j.cluster.instance.host_all_busy_speed = busy;
    j.parallel.pipeline_parallel_degree = pipeline;
    j.parallel.microbatches = pipeline == 1 ? 4 / ranks : 8;
    return j;
  };
  require_valid(job(2, 0.75, 1));
  CHECK(job(2, 0.75, 1).cluster.instance.ranks_share_host_compute());
  CHECK_FALSE(job(2, 1.0, 1).cluster.instance.ranks_share_host_compute());
  const double alone = sim::simulate(job(2, 1.0, 1)).metrics.step_time;
  CHECK(sim::simulate(job(2, 0.75, 1)).metrics.step_time == Approx(alone / 0.75).epsilon(1e-6));
  CHECK_FALSE(sim::simulate(job(2, 0.75, 1)).symmetric);
  // One rank with the whole batch: alone on the host, at full speed.
  Job one = job(1, 0.75, 1);
  one.parallel.microbatches = 1;
  require_valid(one);
  const double single = sim::simulate(one).metrics.step_time;
  Job one_fast = one;
  one_fast.cluster.instance.host_all_busy_speed = 1.0;
  // The shared cores run an execution (max-min shared, to SimGrid's work precision); a
  // GPU host alone sleeps the kernels' time (World::compute): equal to ~1e-9.
  CHECK(single == Approx(sim::simulate(one_fast).metrics.step_time).epsilon(1e-8));
  const double pipe = sim::simulate(job(2, 1.0, 2)).metrics.step_time;
  const double pipe_busy = sim::simulate(job(2, 0.75, 2)).metrics.step_time;
  CHECK(pipe_busy > 1.05 * pipe);
  CHECK(pipe_busy < pipe / 0.75);
}
