#include <catch2/catch.hpp>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/schedule.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

TEST_CASE("GPT-3 175B weights take 350 GB in fp16", "[memory]") {
  const ModelSpec m = load_model("gpt3-175b");
  // 174.6B parameters x 2 bytes (Brown et al. quote 175B; 350 GB is the usual figure).
  CHECK(total_parameters(m) * 2 == Approx(350e9).epsilon(0.01));
  CHECK(total_parameters(m) == Approx(174.6e9).epsilon(0.001));
}

TEST_CASE("Korthikanti per-layer activation bytes", "[memory]") {
  // GPT-3 175B: s 2048, h 12288, a 96, so 5 a s / h = 80 and s b h = 25,165,824 at b = 1.
  const ModelSpec m = load_model("gpt3-175b");
  const double sbh = 2048.0 * 12288.0;
  SECTION("t = 1: s b h (34 + 5 a s / h) = 114 s b h") {
    CHECK(layer_activation_bytes(m, 1, 1, false) == Approx(114 * sbh).epsilon(1e-12));
    CHECK(layer_activation_bytes(m, 1, 1, false) == Approx(2868903936.0).epsilon(1e-12));
    CHECK(layer_activation_bytes(m, 4, 1, false) == Approx(4 * 114 * sbh).epsilon(1e-12));
  }
  SECTION("t = 8: s b h (10 + 24/8 + 80/8) = 23 s b h") {
    CHECK(layer_activation_bytes(m, 1, 8, false) == Approx(23 * sbh).epsilon(1e-12));
    CHECK(layer_activation_bytes(m, 2, 8, false) == Approx(2 * 578813952.0).epsilon(1e-12));
  }
  SECTION("FlashAttention drops the 5 a s / (h t) score term") {
    CHECK(layer_activation_bytes(m, 1, 1, true) == Approx(34 * sbh).epsilon(1e-12));
    CHECK(layer_activation_bytes(m, 1, 8, true) == Approx(13 * sbh).epsilon(1e-12));
  }
  SECTION("GPT-2 small: s 1024, h 768, a 12 -> 5 a s / h = 80 as well") {
    const ModelSpec g = load_model("gpt2-small");
    CHECK(layer_activation_bytes(g, 8, 1, false) == Approx(114.0 * 1024 * 8 * 768).epsilon(1e-12));
    CHECK(layer_activation_bytes(g, 8, 4, false) == Approx((10 + 6 + 20) * 1024.0 * 8 * 768).epsilon(1e-12));
  }
}

TEST_CASE("micro-batches in flight per pipeline schedule", "[memory]") {
  ParallelConfig pc;
  pc.pipeline_parallel_degree = 4;
  SECTION("1F1B holds min(p, m) on stage 0 and p - s on stage s") {
    pc.pipeline = PipelineSchedule::one_f_one_b;
    pc.microbatches = 16;
    CHECK(in_flight_microbatches(pc, 0) == 4);
    CHECK(in_flight_microbatches(pc, 1) == 3);
    CHECK(in_flight_microbatches(pc, 3) == 1);
    pc.microbatches = 2;
    CHECK(in_flight_microbatches(pc, 0) == 2);
    CHECK(in_flight_microbatches(pc, 3) == 1);
  }
  SECTION("GPipe holds every micro-batch") {
    pc.pipeline = PipelineSchedule::gpipe;
    pc.microbatches = 16;
    pc.active_microbatches = 1000;
    CHECK(in_flight_microbatches(pc, 0) == 16);
    CHECK(in_flight_microbatches(pc, 3) == 16);
    SECTION("capped by active_microbatches (SMP's limit on micro-batches in process)") {
      pc.active_microbatches = 5;
      CHECK(in_flight_microbatches(pc, 0) == 5);
      pc.active_microbatches = 0;  // default p + 2
      CHECK(in_flight_microbatches(pc, 0) == 6);
    }
  }
  SECTION("interleaved 1F1B with v virtual stages holds p + (p-1)/v on stage 0") {
    pc.pipeline = PipelineSchedule::one_f_one_b;
    pc.microbatches = 64;
    pc.active_microbatches = 1000;
    pc.virtual_stages = 2;
    CHECK(in_flight_microbatches(pc, 0) == Approx(4 + 3.0 / 2));
    pc.pipeline_parallel_degree = 8;
    pc.virtual_stages = 4;
    CHECK(in_flight_microbatches(pc, 0) == Approx(8 + 7.0 / 4));
  }
  SECTION("no pipeline: one micro-batch at a time") {
    pc.pipeline_parallel_degree = 1;
    pc.microbatches = 8;
    CHECK(in_flight_microbatches(pc, 0) == 1);
  }
}

TEST_CASE("model states: 16 bytes per parameter for mixed-precision Adam, split by sharding",
          "[memory]") {
  // GPT-2 small on one p4d node, pure data parallel (dp 8), pp = tp = 1: every GPU holds
  // the whole model, N = 124,439,808. ZeRO paper: fp16 weights 2N, fp16 gradients 2N,
  // fp32 master weights + Adam moments 12N.
  const double N = 124439808.0;
  Job j = p4d_job("gpt2-small", 1, 64);
  require_valid(j);
  const MemoryBreakdown base = stage_memory(j, 0);
  CHECK(base.parameters == Approx(2 * N));
  CHECK(base.gradients == Approx(2 * N));
  CHECK(base.optimizer_states == Approx(12 * N));
  CHECK(base.gathered_parameters == 0);

  SECTION("sharded data parallel divides parameters, gradients and optimizer states") {
    for (int sdp : {2, 4, 8}) {
      INFO("sdp " << sdp);
      Job s = j;
      s.parallel.sharded_data_parallel_degree = sdp;
      require_valid(s);
      const MemoryBreakdown mb = stage_memory(s, 0);
      CHECK(mb.parameters == Approx(2 * N / sdp));
      CHECK(mb.gradients == Approx(2 * N / sdp));
      CHECK(mb.optimizer_states == Approx(12 * N / sdp));
      CHECK(mb.parameters * sdp == Approx(base.parameters));
      CHECK(mb.gathered_parameters > 0);  // full layers are materialised to compute
    }
  }
  SECTION("shard_optimizer_state divides only the optimizer states, by dp") {
    Job s = j;
    s.parallel.shard_optimizer_state = true;
    require_valid(s);
    const MemoryBreakdown mb = stage_memory(s, 0);
    CHECK(mb.parameters == Approx(2 * N));
    CHECK(mb.gradients == Approx(2 * N));
    CHECK(mb.optimizer_states == Approx(12 * N / 8));
  }
  SECTION("shard_gradients (ZeRO-2) divides the gradients too: 2 + (2 + 12) / dp bytes") {
    // ZeRO's table (Rajbhandari et al. 2020, Fig. 1): P_os+g keeps 2N + (2 + 12) N / Nd.
    Job s = j;
    s.parallel.shard_optimizer_state = true;
    s.parallel.shard_gradients = true;
    require_valid(s);
    const MemoryBreakdown mb = stage_memory(s, 0);
    CHECK(mb.parameters == Approx(2 * N));
    CHECK(mb.gradients == Approx(2 * N / 8));
    CHECK(mb.optimizer_states == Approx(12 * N / 8));
    // The buckets still hold whole layers' gradients while they travel.
    CHECK(mb.communication_buffers == Approx(base.communication_buffers));
    // In fp32 the slice's reduced gradient is the gradients counted: weights 4N, the
    // gradient slice 4N / dp, moments and the slice's own weights (8 + 4) N / dp.
    s.training.precision = Precision::fp32;
    const MemoryBreakdown f = stage_memory(s, 0);
    CHECK(f.gradients == Approx(4 * N / 8));
    CHECK(f.optimizer_states == Approx(12 * N / 8));
  }
  SECTION("fp32 training: a sharded optimizer adds its slice's weights and gradient") {
    // fp32 Adam: weights 4N, gradients 4N, moments 8N. With shard_optimizer_state each
    // rank's slice also has its own fp32 weights and reduced gradient: (8 + 4 + 4) N / dp.
    Job s = j;
    s.training.precision = Precision::fp32;
    const MemoryBreakdown plain = stage_memory(s, 0);
    CHECK(plain.optimizer_states == Approx(8 * N));
    s.parallel.shard_optimizer_state = true;
    require_valid(s);
    const MemoryBreakdown mb = stage_memory(s, 0);
    CHECK(mb.parameters == Approx(4 * N));
    CHECK(mb.gradients == Approx(4 * N));
    CHECK(mb.optimizer_states == Approx(16 * N / 8));
  }
  SECTION("SGD keeps one fp32 momentum: 2 + 2 + 8 bytes") {
    Job s = j;
    s.training.optimizer = Optimizer::sgd;
    CHECK(stage_memory(s, 0).optimizer_states == Approx(8 * N));
  }
  SECTION("tensor parallel splits the states over t, norms and row-parallel biases whole") {
    // Megatron-LM's split over t = 4 (hand counts: test_program.cpp): each of the 12
    // layers 7,083,264 / 4 split plus 6h = 4,608 whole (two layer norms' scale and shift,
    // the projection's and fc2's biases), the token table 38,597,376 / 4 plus the
    // positions 786,432 whole, the final norm 1,536 whole: 31,742,400 on a rank, not N / 4.
    Job s = j;
    s.parallel.tensor_parallel_degree = 4;
    require_valid(s);
    const double on_rank = 12 * (7083264.0 / 4 + 4608) + 38597376.0 / 4 + 786432 + 1536;
    CHECK(on_rank == 31742400.0);
    CHECK(stage_memory(s, 0).parameters == Approx(2 * on_rank).epsilon(1e-15));
    CHECK(stage_memory(s, 0).optimizer_states == Approx(12 * on_rank).epsilon(1e-15));
  }
}

TEST_CASE("full checkpointing stores each layer's input: 2 s b h bytes per in-flight micro-batch",
          "[memory]") {
  const double s = 1024, h = 768;
  SECTION("no pipeline: 12 layers, one micro-batch of b = 8") {
    Job j = p4d_job("gpt2-small", 1, 64);  // dp 8 -> b = 8
    j.parallel.activation_checkpointing = Checkpointing::full;
    require_valid(j);
    REQUIRE(j.microbatch_size() == 8);
    const MemoryBreakdown mb = stage_memory(j, 0);
    CHECK(mb.activations == Approx(12 * 2 * s * 8 * h));
    // During backward one layer's full activations are rebuilt (34 + 80 = 114 s b h).
    CHECK(mb.activation_working == Approx(114 * s * 8 * h));
  }
  SECTION("pp 4, 1F1B, m 8: stage 0 holds 4 micro-batches of its 3 layers, the last stage 1") {
    Job j = p4d_job("gpt2-small", 1, 64);  // dp 2 -> b = 64 / (2 * 8) = 4
    j.parallel.pipeline_parallel_degree = 4;
    j.parallel.microbatches = 8;
    j.parallel.activation_checkpointing = Checkpointing::full;
    require_valid(j);
    REQUIRE(j.microbatch_size() == 4);
    CHECK(stage_memory(j, 0).activations == Approx(3 * 4 * 2 * s * 4 * h));
    CHECK(stage_memory(j, 3).activations == Approx(3 * 1 * 2 * s * 4 * h));
  }
  SECTION("without checkpointing the whole Korthikanti footprint is stored") {
    Job j = p4d_job("gpt2-small", 1, 64);
    require_valid(j);
    CHECK(stage_memory(j, 0).activations == Approx(12 * 114 * s * 8 * h));
    CHECK(stage_memory(j, 0).activation_working == 0);
  }
}

TEST_CASE("selective checkpointing drops the attention scores: 5 a s^2 b bytes per layer, rebuilt one layer at a time",
          "[memory]") {
  // GPT-2 small (s 1024, h 768, a 12), b = 8: a layer keeps 34 s b h bytes and the scores
  // 5 a s^2 b = 80 s b h (Korthikanti et al. 2022, Table 2, t = 1).
  const double s = 1024, h = 768, a = 12, b = 8;
  Job j = p4d_job("gpt2-small", 1, 64);  // dp 8 -> b = 8
  j.parallel.activation_checkpointing = Checkpointing::selective;
  require_valid(j);
  REQUIRE(j.microbatch_size() == 8);
  const MemoryBreakdown mb = stage_memory(j, 0);
  CHECK(mb.activations == 12 * 34 * s * b * h);
  CHECK(mb.activation_working == 5 * a * s * s * b);
  SECTION("with FlashAttention there are no scores: nothing to rebuild") {
    j.parallel.flash_attention = true;
    CHECK(stage_memory(j, 0).activations == 12 * 34 * s * b * h);
    CHECK(stage_memory(j, 0).activation_working == 0);
  }
}

TEST_CASE("a job that cannot fit is reported with the reason in GiB", "[memory][estimator]") {
  // GPT-3 175B on one p4d node with tp 8: 174.6e9 / 8 x 16 bytes = 349 GB of model states
  // per 40 GiB GPU.
  Job j = p4d_job("gpt3-175b", 1, 1);
  j.parallel.tensor_parallel_degree = 8;
  require_valid(j);
  const Estimate e = estimate(j);
  CHECK_FALSE(e.fits);
  CHECK_FALSE(e.not_fit_reason.empty());
  CHECK_THAT(e.not_fit_reason, Catch::Contains("GiB"));
  CHECK_THAT(e.not_fit_reason, Catch::Contains("optimizer states"));  // 12 of the 16 bytes
  CHECK(e.memory.total() > 174.6e9 / 8 * 16);
  CHECK(e.memory_capacity == Approx(40.0 * 1024 * 1024 * 1024));

  SECTION("GPT-2 small on the same node fits, with no reason") {
    Job small = p4d_job("gpt2-small", 1, 64);
    require_valid(small);
    const Estimate es = estimate(small);
    CHECK(es.fits);
    CHECK(es.not_fit_reason.empty());
  }
}

TEST_CASE("without dropout a layer keeps no masks: s b h (32 + 2 a s / h)", "[memory][layer_plan]") {
  // Korthikanti's 34 s b h counts two 1-byte dropout masks (s b h each) and the scores'
  // 5 a s^2 b = softmax output 2 + mask 1 + dropped-out scores 2 bytes an element. With
  // dropout 0 (BLOOM's and GPT-NeoX's configs) the masks and the dropped-out copy go:
  // GPT-2 small shape at b = 1, 2 a s / h = 2 * 12 * 1024 / 768 = 32: 64 s b h.
  ModelSpec m = load_model("gpt2-small");
  const double sbh = 1024.0 * 768.0;
  CHECK(layer_activation_bytes(m, 1, 1, false) == Approx(114 * sbh));
  m.dropout = 0.0;
  CHECK(layer_activation_bytes(m, 1, 1, false) == Approx((32 + 32) * sbh));
  CHECK(layer_activation_bytes(m, 1, 1, true) == Approx(32 * sbh));
  // t = 4: s b h (8 + 24/4 + 2 a s / (h t)) = s b h (8 + 6 + 8)
  CHECK(layer_activation_bytes(m, 1, 4, false) == Approx(22 * sbh));
}

TEST_CASE("the loss in the training precision keeps one 16-bit buffer per logit", "[memory][layer_plan]") {
  // GPT-2 small (vocab 50257, s 1024), one p4d node, dp 8, b 8: b s V logits on the head.
  Job j = p4d_job("gpt2-small", 1, 64);
  require_valid(j);
  const double logits = 8.0 * 1024 * 50257;
  CHECK(logits_bytes_per_microbatch(j) == Approx(6 * logits));  // fp16 logits + fp32 copy
  j.training.loss_precision = LossPrecision::training;
  CHECK(logits_bytes_per_microbatch(j) == Approx(2 * logits));
  j.training.precision = Precision::fp32;  // in place over fp32 logits: 4 bytes
  CHECK(logits_bytes_per_microbatch(j) == Approx(4 * logits));
}
