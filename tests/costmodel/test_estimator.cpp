#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

// A spread of configurations touching every branch of the estimator.
std::vector<std::pair<std::string, Job>> assorted_jobs() {
  std::vector<std::pair<std::string, Job>> jobs;
  {
    Job j = p4d_job("gpt2-small", 1, 64);
    jobs.emplace_back("gpt2 pure DP", j);
  }
  {
    Job j = p4d_job("gpt2-small", 2, 128);
    j.parallel.pipeline_parallel_degree = 2;
    j.parallel.tensor_parallel_degree = 2;
    j.parallel.microbatches = 4;
    j.parallel.activation_checkpointing = Checkpointing::selective;
    j.training.gradient_accumulation = 2;
    jobs.emplace_back("gpt2 pp2 tp2 ga2 selective", j);
  }
  {
    Job j = p4d_job("gpt2-small", 2, 64);
    j.parallel.sharded_data_parallel_degree = 8;
    j.parallel.activation_checkpointing = Checkpointing::full;
    j.parallel.offload_activations = true;
    j.parallel.flash_attention = true;
    jobs.emplace_back("gpt2 sdp8 offload flash", j);
  }
  {
    Job j = p4d_job("gpt2-small", 2, 64);
    j.parallel.sharded_data_parallel_degree = 16;
    j.parallel.sharded_collective = CollectiveAlgorithm::all_to_all;
    jobs.emplace_back("gpt2 sdp16 all_to_all", j);
  }
  {
    Job j = p4d_job("gpt3-175b", 120, 1920);
    j.parallel.pipeline_parallel_degree = 8;
    j.parallel.tensor_parallel_degree = 8;
    j.parallel.microbatches = 64;
    j.parallel.activation_checkpointing = Checkpointing::full;
    j.parallel.shard_optimizer_state = true;
    jobs.emplace_back("gpt3 pp8 tp8 dp15", j);
  }
  {
    Job j = p4d_job("gpt3-175b", 16, 256);
    j.parallel.pipeline_parallel_degree = 16;
    j.parallel.tensor_parallel_degree = 8;
    j.parallel.microbatches = 32;
    j.parallel.virtual_stages = 2;
    j.parallel.activation_checkpointing = Checkpointing::full;
    jobs.emplace_back("gpt3 interleaved v2", j);
  }
  return jobs;
}

}  // namespace

TEST_CASE("on an ideal GPU a one-rank step is Megatron's FLOP count over the peak", "[estimator]") {
  // Every GEMM at the peak (no tile, wave or prologue losses), memory that costs nothing,
  // no launch floor: a step is then its FLOPs (forward + backward = 3 x forward, the
  // 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) of Narayanan et al.) over the peak, whatever
  // the shapes. The time a single rank spends is nothing but its kernels.
  Job j = p4d_job("gpt2-medium", 1, 8);
  j.cluster.nodes = 1;
  j.cluster.instance.gpus_per_node = 1;
  GpuProfile& gpu = j.cluster.instance.gpu;
  gpu.gemm = GemmEfficiency{1.0, 1.0, 1.0, 0.0};
  gpu.attention.score_bmm_efficiency = 10.0;  // capped at the GEMM's 1.0
  gpu.hbm_bw = 1e30;
  gpu.kernel_overhead = 0;
  for (int micro : {1, 4}) {
    j.parallel.microbatches = micro;
    require_valid(j);
    const ModelSpec& m = j.model;
    const double flops = megatron_model_flops(8, m.seq_len, m.layers, m.hidden, m.vocab);
    CHECK(estimate(j).step_time == Approx(flops / gpu.peak_flops(Precision::fp16)).epsilon(1e-9));
  }
}

TEST_CASE("parts that a configuration does not use are zero", "[estimator]") {
  SECTION("pure data parallel: no TP, no pipeline, no sharding, no offload") {
    Job j = p4d_job("gpt2-small", 2, 64);
    require_valid(j);
    const StepBreakdown b = estimate(j).breakdown;
    CHECK(b.tensor_parallel_comm == 0);
    CHECK(b.pipeline_bubble == 0);
    CHECK(b.pipeline_p2p == 0);
    CHECK(b.sharded_comm == 0);
    CHECK(b.offload_traffic == 0);
    CHECK(b.recompute == 0);
    CHECK(b.data_parallel_comm > 0);
  }
  SECTION("a single GPU has no communication at all") {
    Job j = p4d_job("gpt2-small", 1, 8);
    j.cluster.instance.gpus_per_node = 1;
    require_valid(j);
    const StepBreakdown b = estimate(j).breakdown;
    CHECK(b.data_parallel_comm == 0);
    CHECK(b.tensor_parallel_comm == 0);
    CHECK(b.pipeline_p2p == 0);
  }
}

TEST_CASE("the pipeline bubble is (p-1)/(v m) of the busy time", "[estimator]") {
  // Narayanan et al. SC'21: bubble fraction (p - 1) / m for GPipe and 1F1B, divided by v
  // for the interleaved schedule, when stages are uniform. Busy time = compute +
  // tensor-parallel communication. A tiny vocabulary makes the embedding and LM head
  // negligible, so every stage costs the same (to well under 1%).
  struct Case {
    const char* name;
    int pp, tp, m, v, ga;
    PipelineSchedule schedule;
  };
  const Case cases[] = {
      {"GPipe p4 m8", 4, 1, 8, 1, 1, PipelineSchedule::gpipe},
      {"1F1B p4 m8", 4, 1, 8, 1, 1, PipelineSchedule::one_f_one_b},
      {"1F1B p2 tp2 m16 ga2", 2, 2, 16, 1, 2, PipelineSchedule::one_f_one_b},
      {"interleaved p4 v3 m8", 4, 1, 8, 3, 1, PipelineSchedule::one_f_one_b},
      {"1F1B p4 m2 (fewer micro-batches than stages)", 4, 1, 2, 1, 1, PipelineSchedule::one_f_one_b},
      {"GPipe p2 tp4 m5", 2, 4, 5, 1, 1, PipelineSchedule::gpipe},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    Job j = p4d_job("gpt2-small", 1, 0);
    j.model.vocab = 8;
    j.model.layers = 24;
    const int dp = 8 / (c.pp * c.tp);
    j.training.global_batch = dp * c.m * c.ga * 2;  // b = 2
    j.training.gradient_accumulation = c.ga;
    j.parallel.pipeline_parallel_degree = c.pp;
    j.parallel.tensor_parallel_degree = c.tp;
    j.parallel.microbatches = c.m;
    j.parallel.virtual_stages = c.v;
    j.parallel.pipeline = c.schedule;
    j.parallel.active_microbatches = 1000;
    require_valid(j);
    const StepBreakdown b = estimate(j).breakdown;
    REQUIRE(b.compute > 0);
    CHECK(b.pipeline_bubble / (b.compute + b.tensor_parallel_comm) ==
          Approx(double(c.pp - 1) / (c.v * c.m)).epsilon(0.01));
  }
  SECTION("GPipe in windows of active_microbatches fills and drains once per window") {
    Job j = p4d_job("gpt2-small", 1, 0);
    j.model.vocab = 8;
    j.model.layers = 24;
    j.training.global_batch = 2 * 8 * 2;  // dp 2, m 8, b 2
    j.parallel.pipeline_parallel_degree = 4;
    j.parallel.microbatches = 8;
    j.parallel.pipeline = PipelineSchedule::gpipe;
    j.parallel.active_microbatches = 4;  // two windows of 4
    require_valid(j);
    const StepBreakdown b = estimate(j).breakdown;
    CHECK(b.pipeline_bubble / (b.compute + b.tensor_parallel_comm) == Approx(2.0 * 3 / 8).epsilon(0.01));
  }
  SECTION("non-uniform stages: the slowest paces, the others fill and drain") {
    // GPT-2 small's LM head (vocab 50257) makes the last stage the slowest; the bubble is
    // the sum of the other stages' slots, below (p-1) x the slowest slot.
    Job j = p4d_job("gpt2-small", 1, 0);
    j.training.global_batch = 2 * 8 * 2;
    j.parallel.pipeline_parallel_degree = 4;
    j.parallel.microbatches = 8;
    require_valid(j);
    const StepBreakdown b = estimate(j).breakdown;
    const double slot_max = (b.compute + b.tensor_parallel_comm) / 8;
    CHECK(b.pipeline_bubble < 3 * slot_max * 0.99);
    CHECK(b.pipeline_bubble > 3 * slot_max * 0.3);
  }
  SECTION("GPT-3 175B, pp 8 tp 8 m 64 across nodes") {
    Job j = p4d_job("gpt3-175b", 120, 1920);
    j.parallel.pipeline_parallel_degree = 8;
    j.parallel.tensor_parallel_degree = 8;
    j.parallel.microbatches = 64;
    j.parallel.activation_checkpointing = Checkpointing::full;
    require_valid(j);
    const StepBreakdown b = estimate(j).breakdown;
    // Stage 0 carries the embedding and the last stage the LM head: a few percent
    // non-uniform, so the bubble is close to, and below, (p-1)/m.
    CHECK(b.pipeline_bubble / (b.compute + b.tensor_parallel_comm) == Approx(7.0 / 64).epsilon(0.05));
    CHECK(b.pipeline_bubble / (b.compute + b.tensor_parallel_comm) <= 7.0 / 64);
  }
}

TEST_CASE("throughput and FLOP rates are consistent with the step time", "[estimator]") {
  for (const auto& [name, job] : assorted_jobs()) {
    INFO(name);
    const Estimate e = estimate(job);
    const double B = job.training.global_batch, N = job.world_size();
    CHECK(e.mfu == Approx(e.tflops_per_gpu * 1e12 / 312e12).epsilon(1e-12));  // A100 fp16 peak
    // The model FLOPs are the 72-formula's (both presets have a 4h FFN and MHA).
    const ModelSpec& m = job.model;
    CHECK(e.model_flops == Approx(megatron_model_flops(B, m.seq_len, m.layers, m.hidden, m.vocab)).epsilon(1e-9));
    CHECK(e.tflops_per_gpu ==
          Approx(megatron_model_flops(B, m.seq_len, m.layers, m.hidden, m.vocab) / (e.step_time * N) / 1e12)
              .epsilon(1e-9));
  }
  SECTION("with full recompute, hardware/model = 96(1+s/6h+V/16lh) / 72(1+s/6h+V/12lh)") {
    Job j = p4d_job("gpt3-175b", 120, 1920);
    j.parallel.pipeline_parallel_degree = 8;
    j.parallel.tensor_parallel_degree = 8;
    j.parallel.microbatches = 64;
    j.parallel.activation_checkpointing = Checkpointing::full;
    require_valid(j);
    const Estimate e = estimate(j);
    const double s = 2048, l = 96, h = 12288, V = 50257;
    const double ratio = (96 * (1 + s / (6 * h) + V / (16 * l * h))) / (72 * (1 + s / (6 * h) + V / (12 * l * h)));
    CHECK(e.hw_tflops_per_gpu / e.tflops_per_gpu == Approx(ratio).epsilon(1e-9));
    CHECK(ratio == Approx(1.3322).epsilon(1e-3));
  }
  SECTION("without recompute, hardware and model FLOPs agree") {
    Job j = p4d_job("gpt2-small", 1, 64);
    const Estimate e = estimate(j);
    CHECK(e.hw_tflops_per_gpu == Approx(e.tflops_per_gpu).epsilon(1e-12));
  }
}

TEST_CASE("FlashAttention makes a standard-attention job faster and smaller", "[estimator]") {
  SECTION("GPT-2 small, one node, pure DP") {
    Job j = p4d_job("gpt2-small", 1, 64);
    Job f = j;
    f.parallel.flash_attention = true;
    require_valid(f);
    const Estimate a = estimate(j), b = estimate(f);
    CHECK(b.step_time < a.step_time);
    CHECK(b.memory.total() < a.memory.total());
    CHECK(b.memory.activations < a.memory.activations);
    // Stored activations drop from 114 to 34 s b h per layer.
    CHECK(b.memory.activations / a.memory.activations == Approx(34.0 / 114.0).epsilon(1e-9));
  }
  SECTION("GPT-3 175B, pp 8 tp 8 with selective checkpointing") {
    Job j = p4d_job("gpt3-175b", 120, 1920);
    j.parallel.pipeline_parallel_degree = 8;
    j.parallel.tensor_parallel_degree = 8;
    j.parallel.microbatches = 64;
    j.parallel.activation_checkpointing = Checkpointing::selective;
    Job f = j;
    f.parallel.flash_attention = true;
    require_valid(f);
    const Estimate a = estimate(j), b = estimate(f);
    CHECK(b.step_time < a.step_time);
    CHECK(b.memory.total() < a.memory.total());
  }
}

TEST_CASE("pure data parallel does not gain per-GPU throughput from more nodes", "[estimator]") {
  // Fixed per-GPU batch (b = 4, one micro-batch): more nodes only add communication.
  double prev_tflops = 1e300, prev_per_gpu_samples = 1e300;
  for (int nodes : {1, 2, 4, 8, 16}) {
    INFO(nodes << " nodes");
    Job j = p4d_job("gpt2-small", nodes, 4 * 8 * nodes);
    require_valid(j);
    REQUIRE(j.microbatch_size() == 4);
    const Estimate e = estimate(j);
    CHECK(e.tflops_per_gpu <= prev_tflops * (1 + 1e-12));
    CHECK(e.samples_per_s / j.world_size() <= prev_per_gpu_samples * (1 + 1e-12));
    prev_tflops = e.tflops_per_gpu;
    prev_per_gpu_samples = e.samples_per_s / j.world_size();
  }
}

TEST_CASE("gradient all-reduce across nodes is only partly hidden", "[estimator]") {
  // The overlap model: at most compute_overlap of a collective's time hides under the
  // backward pass, so at least (1 - compute_overlap) of it stays on the critical path.
  Job one = p4d_job("gpt2-small", 1, 32);
  Job two = p4d_job("gpt2-small", 2, 64);  // same b = 4 per GPU, ring now crosses EFA
  require_valid(one);
  require_valid(two);
  const Estimate a = estimate(one), b = estimate(two);
  const double overlap = two.cluster.instance.ring.compute_overlap;
  REQUIRE(overlap < 1.0);
  CHECK(b.breakdown.data_parallel_comm > a.breakdown.data_parallel_comm);
  CHECK(b.breakdown.data_parallel_exposed > 0);
  CHECK(b.breakdown.data_parallel_exposed >= b.breakdown.data_parallel_comm * (1 - overlap) * (1 - 1e-12));
  // Identical per-GPU compute, more exposed communication: strictly lower throughput.
  CHECK(b.breakdown.compute == Approx(a.breakdown.compute).epsilon(1e-12));
  CHECK(b.tflops_per_gpu < a.tflops_per_gpu);
}

TEST_CASE("twice the micro-batch size costs at most twice the compute", "[estimator]") {
  // Twice the FLOPs per micro-batch; larger GEMMs run at least as efficiently, so compute
  // grows by more than 1x and by no more than 2x.
  Job one = p4d_job("gpt3-175b", 120, 1920);  // b = 1920 / (15 x 64) = 2
  one.parallel.pipeline_parallel_degree = 8;
  one.parallel.tensor_parallel_degree = 8;
  one.parallel.microbatches = 64;
  Job two = one;
  two.training.global_batch = 3840;  // b = 4
  require_valid(one);
  require_valid(two);
  const Estimate a = estimate(one), b = estimate(two);
  CHECK(b.breakdown.compute > a.breakdown.compute);
  CHECK(b.breakdown.compute <= 2.0 * a.breakdown.compute * (1 + 1e-9));
  CHECK(b.step_time > a.step_time);
}

TEST_CASE("activation offload moves the stored activations over the GPU's PCIe share",
          "[estimator][memory]") {
  // GPT-2 small, one node, dp 8, b = 8, one micro-batch: every layer's stored activations
  // go to the host in forward and come back for backward, at pcie_bw / gpus_per_switch.
  const double s = 1024, b = 8, h = 768, layers = 12;
  Job j = p4d_job("gpt2-small", 1, 64);
  j.parallel.offload_activations = true;
  const double pcie_share = j.cluster.instance.pcie_bw / j.cluster.instance.gpus_per_pcie_switch;

  SECTION("full checkpointing: each layer's input, 2 s b h bytes") {
    j.parallel.activation_checkpointing = Checkpointing::full;
    require_valid(j);
    const Estimate e = estimate(j);
    CHECK(e.breakdown.offload_traffic == Approx(2 * layers * 2 * s * b * h / pcie_share).epsilon(1e-9));
    // Memory: horizon + 1 layers stay on the GPU, the rest live on the host; none lost.
    const int horizon = j.parallel.activation_loading_horizon;
    CHECK(e.memory.activations == Approx((horizon + 1) * 2 * s * b * h));
    CHECK(e.memory.activations + e.memory.host_offload == Approx(layers * 2 * s * b * h));
  }
  SECTION("selective checkpointing: the 34 s b h the layer keeps") {
    j.parallel.activation_checkpointing = Checkpointing::selective;
    require_valid(j);
    const Estimate e = estimate(j);
    // The memory model stores (and offloads) 34 s b h per layer...
    CHECK(e.memory.activations + e.memory.host_offload == Approx(layers * 34 * s * b * h));
  }
}

// Regression: the estimator once timed only the layer inputs (2 s b h) while memory
// offloaded everything selective checkpointing keeps (34 s b h per layer).
TEST_CASE("selective checkpointing offload traffic matches the bytes offloaded",
          "[estimator][memory]") {
  const double s = 1024, b = 8, h = 768, layers = 12;
  Job j = p4d_job("gpt2-small", 1, 64);
  j.parallel.offload_activations = true;
  j.parallel.activation_checkpointing = Checkpointing::selective;
  require_valid(j);
  const double pcie_share = j.cluster.instance.pcie_bw / j.cluster.instance.gpus_per_pcie_switch;
  const Estimate e = estimate(j);
  CHECK(e.breakdown.offload_traffic == Approx(2 * layers * 34 * s * b * h / pcie_share).epsilon(1e-9));
}
