#include <catch2/catch.hpp>

#include <string>

#include "job_fixtures.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using partune::testing::make_model;

TEST_CASE("op-by-op FLOPs sum to the Megatron closed forms", "[flops]") {
  const ModelSpec m = load_model("gpt3-175b");
  const double B = 1536;
  CHECK(model_flops_per_step(m, B) ==
        Approx(megatron_model_flops(B, m.seq_len, m.layers, m.hidden, m.vocab)).epsilon(1e-12));
  CHECK(hardware_flops_per_step(m, B, Checkpointing::full) ==
        Approx(megatron_hardware_flops(B, m.seq_len, m.layers, m.hidden, m.vocab)).epsilon(1e-12));
}

// The closed forms of published-tables.md "Conventions", evaluated by hand (exact
// rational arithmetic, then written out) for each shape:
//   F    = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
//   F_hw = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
TEST_CASE("per-step FLOPs match hand-evaluated Megatron numbers", "[flops]") {
  SECTION("tiny model l=2 h=4 s=8 V=16 B=1, every op counted by hand") {
    // heads 2, ffn 4h = 16. Forward per layer (T = B s = 8 tokens):
    //   QKV 2*8*4*12 = 768, QK^T 2*1*8*8*4 = 512, AV 512, proj 2*8*4*4 = 256,
    //   fc1 2*8*4*16 = 1024, fc2 1024  -> 4096 per layer, 8192 for two layers.
    // LM head 2*8*4*16 = 1024. Model FLOPs = 3 * (8192 + 1024) = 27648
    //   = 72*1*8*2*16*(1 + 8/24 + 16/96) = 18432 * 1.5.
    // Full recompute adds one forward of every layer: 27648 + 8192 = 35840
    //   = 96*1*8*2*16*(1 + 1/3 + 1/8).
    const ModelSpec m = make_model(2, 4, 2, 16, 16, 8);
    const LayerFlops lf = layer_forward_flops(m, 1);
    CHECK(lf.qkv == 768);
    CHECK(lf.scores == 512);
    CHECK(lf.context == 512);
    CHECK(lf.projection == 256);
    CHECK(lf.fc1 == 1024);
    CHECK(lf.fc2 == 1024);
    CHECK(lf.total() == 4096);
    CHECK(logits_forward_flops(m, 1) == 1024);
    CHECK(model_flops_per_step(m, 1) == Approx(27648).epsilon(1e-12));
    CHECK(hardware_flops_per_step(m, 1, Checkpointing::full) == Approx(35840).epsilon(1e-12));
    CHECK(hardware_flops_per_step(m, 1, Checkpointing::none) == Approx(27648).epsilon(1e-12));
    CHECK(megatron_model_flops(1, 8, 2, 4, 16) == Approx(27648).epsilon(1e-12));
    CHECK(megatron_hardware_flops(1, 8, 2, 4, 16) == Approx(35840).epsilon(1e-12));
  }

  SECTION("GPT-3 175B, B=1536, s=2048") {
    const ModelSpec m = load_model("gpt3-175b");
    REQUIRE(m.layers == 96);
    REQUIRE(m.hidden == 12288);
    REQUIRE(m.vocab == 50257);
    REQUIRE(m.seq_len == 2048);
    CHECK(model_flops_per_step(m, 1536) == Approx(3385978038062678016.0).epsilon(1e-9));
    CHECK(hardware_flops_per_step(m, 1536, Checkpointing::full) ==
          Approx(4510752044998459392.0).epsilon(1e-9));
    // Kaplan et al.'s 6 N D rule (N = non-embedding parameters = 12 l h^2) is within a
    // few percent for this shape (attention and logits add ~3%).
    const double six_nd = 6.0 * 12.0 * 96 * 12288.0 * 12288.0 * 1536 * 2048;
    CHECK(model_flops_per_step(m, 1536) / six_nd == Approx(1.0).margin(0.05));
  }

  SECTION("GPT-2 small, B=512, s=1024") {
    const ModelSpec m = load_model("gpt2-small");
    REQUIRE(m.layers == 12);
    REQUIRE(m.hidden == 768);
    REQUIRE(m.seq_len == 1024);
    CHECK(model_flops_per_step(m, 512) == Approx(447971799859200.0).epsilon(1e-9));
    CHECK(hardware_flops_per_step(m, 512, Checkpointing::full) ==
          Approx(556823451009024.0).epsilon(1e-9));
  }

  SECTION("GPT-NeoX-20B shape with ffn given explicitly as 4h") {
    // l 44, h 6144, 64 heads, ffn 24576 = 4h, vocab 50432, s 2048, B 1024.
    const ModelSpec m = make_model(44, 6144, 64, 4 * 6144, 50432, 2048);
    CHECK(model_flops_per_step(m, 1024) == Approx(268626083828465664.0).epsilon(1e-9));
    CHECK(hardware_flops_per_step(m, 1024, Checkpointing::full) ==
          Approx(356868489027256320.0).epsilon(1e-9));
  }
}

TEST_CASE("FLOPs of shapes outside the closed form are counted op by op", "[flops]") {
  // l=2, h=8, 4 heads (head_dim 2), 2 KV heads (kv = 4), ffn 12 (not 4h), s=4, V=10, B=2,
  // T = 8 tokens. Forward per layer: QKV 2*8*8*(8+2*4) = 2048, QK^T + AV 4*2*16*8 = 1024,
  // proj 2*8*64 = 1024, fc1 + fc2 4*8*8*12 = 3072 -> 7168; two layers 14336.
  // LM head 2*8*8*10 = 1280. Model = 3*(14336 + 1280) = 46848.
  ModelSpec m = make_model(2, 8, 4, 12, 10, 4);
  m.attention = AttentionKind::gqa;
  m.kv_heads = 2;
  CHECK(layer_forward_flops(m, 2).total() == 7168);
  CHECK(model_flops_per_step(m, 2) == Approx(46848).epsilon(1e-12));
  CHECK(hardware_flops_per_step(m, 2, Checkpointing::full) == Approx(46848 + 14336).epsilon(1e-12));
  // The 72-formula assumes 4h FFN and full MHA; this shape must not match it.
  CHECK(model_flops_per_step(m, 2) != Approx(megatron_model_flops(2, 4, 2, 8, 10)).epsilon(1e-3));
}

TEST_CASE("selective checkpointing adds exactly the attention-core forward FLOPs", "[flops]") {
  // Recomputing QK^T and AV costs 4 B s^2 h per layer.
  SECTION("tiny model by hand") {
    const ModelSpec m = make_model(2, 4, 2, 16, 16, 8);
    // 27648 + 2 layers * 4*1*64*4 = 27648 + 2048
    CHECK(hardware_flops_per_step(m, 1, Checkpointing::selective) == Approx(29696).epsilon(1e-12));
  }
  SECTION("GPT-3 175B") {
    const ModelSpec m = load_model("gpt3-175b");
    const double B = 1536, s = 2048, h = 12288, l = 96;
    const double extra = l * 4.0 * B * s * s * h;
    CHECK(hardware_flops_per_step(m, B, Checkpointing::selective) -
              hardware_flops_per_step(m, B, Checkpointing::none) ==
          Approx(extra).epsilon(1e-6));
    CHECK(hardware_flops_per_step(m, B, Checkpointing::selective) ==
          Approx(3385978038062678016.0 + extra).epsilon(1e-9));
  }
  SECTION("GPT-2 small") {
    const ModelSpec m = load_model("gpt2-small");
    const double B = 8, s = 1024, h = 768, l = 12;
    CHECK(hardware_flops_per_step(m, B, Checkpointing::selective) -
              model_flops_per_step(m, B) ==
          Approx(l * 4.0 * B * s * s * h).epsilon(1e-6));
  }
}

TEST_CASE("recomputed FLOPs per layer: the attention core under selective, the forward under full",
          "[flops][layer_plan]") {
  // Korthikanti et al. 2022, §4.2: selective recomputation repeats Q K^T (2 b s^2 h) and
  // attention over V (2 b s^2 h); full recomputation one whole layer forward,
  // 24 b s h^2 + 4 b s^2 h for a 4h FFN and as many key/value heads as heads.
  SECTION("tiny model l=2 h=4 s=8, b=1, every op by hand") {
    const ModelSpec m = make_model(2, 4, 2, 16, 16, 8);
    CHECK(recomputed_forward_flops(m, 1, Checkpointing::none) == 0);
    CHECK(recomputed_forward_flops(m, 1, Checkpointing::selective) == 2 * 2.0 * 1 * 8 * 8 * 4);  // 1024
    CHECK(recomputed_forward_flops(m, 1, Checkpointing::full) == 768 + 512 + 512 + 256 + 1024 + 1024);
  }
  SECTION("GPT-3 175B, b=1: 4 b s^2 h = 206,158,430,208; 24 b s h^2 + 4 b s^2 h = 7,627,861,917,696") {
    const ModelSpec m = load_model("gpt3-175b");
    CHECK(recomputed_forward_flops(m, 1, Checkpointing::selective) == Approx(206158430208.0).epsilon(1e-12));
    CHECK(recomputed_forward_flops(m, 1, Checkpointing::full) == Approx(7627861917696.0).epsilon(1e-12));
    CHECK(recomputed_forward_flops(m, 4, Checkpointing::selective) == Approx(4 * 206158430208.0).epsilon(1e-12));
  }
}

TEST_CASE("the recompute rule is the layer plan's flags: FLOPs, time and memory follow them",
          "[flops][layer_plan]") {
  // GPT-2 small (s 1024, h 768, a 12), b = 8, t = 1, no FlashAttention, on an A100.
  const ModelSpec m = load_model("gpt2-small");
  const GpuProfile gpu = load_instance_type("p4d.24xlarge").gpu;
  PlanConfig c;
  c.sequences = 8;
  const double s = 1024, h = 768, b = 8, a = 12;
  LayerPlan plan = transformer_layer_plan(m, c);
  const auto time = [&](const LayerPlan& p) { return plan_time(gpu, p, Precision::fp16, false); };
  SECTION("as built: selective repeats the attention core and drops its scores (5 a s^2 b bytes)") {
    CHECK(plan.recomputed_flops(Checkpointing::selective) == 4 * b * s * s * h);
    CHECK(plan.recomputed_bytes(Checkpointing::selective) == 5 * a * s * s * b);
    CHECK(plan.stored_bytes(Checkpointing::none) - plan.stored_bytes(Checkpointing::selective) ==
          5 * a * s * s * b);
    // Full rebuilds every byte the layer keeps without checkpointing, 34 s b h + 5 a s^2 b.
    CHECK(plan.recomputed_bytes(Checkpointing::full) == 34 * s * b * h + 5 * a * s * s * b);
    CHECK(time(plan).recompute(Checkpointing::none) == 0);
    CHECK(time(plan).recompute(Checkpointing::selective) > 0);
    CHECK(time(plan).recompute(Checkpointing::selective) < time(plan).recompute(Checkpointing::full));
  }
  SECTION("an attention core not marked for selective recomputation: nothing is recomputed or dropped") {
    LayerPlan unmarked = plan;
    for (PlanOp& op : unmarked.ops) op.selective_recompute = false;
    CHECK(unmarked.recomputed_flops(Checkpointing::selective) == 0);
    CHECK(unmarked.recomputed_bytes(Checkpointing::selective) == 0);
    CHECK(unmarked.stored_bytes(Checkpointing::selective) == unmarked.stored_bytes(Checkpointing::none));
    CHECK(time(unmarked).recompute(Checkpointing::selective) == 0);
    CHECK(time(unmarked).recompute(Checkpointing::full) == time(plan).recompute(Checkpointing::full));
  }
  SECTION("marking fc1 as well adds its FLOPs (2 b s h 4h) and its GEMM's forward time") {
    LayerPlan more = plan;
    for (PlanOp& op : more.ops)
      if (op.role == PlanOpRole::fc1) op.selective_recompute = true;
    CHECK(more.recomputed_flops(Checkpointing::selective) == 4 * b * s * s * h + 2 * b * s * h * 4 * h);
    CHECK(time(more).recompute(Checkpointing::selective) ==
          Approx(time(plan).recompute(Checkpointing::selective) + gemm_time(gpu, Precision::fp16, b * s, 4 * h, h))
              .epsilon(1e-12));
    CHECK(time(more).recompute(Checkpointing::full) == time(plan).recompute(Checkpointing::full));
  }
}

TEST_CASE("parameter counts match published model sizes", "[flops][model]") {
  SECTION("GPT-2 small has 124,439,808 parameters (HF gpt2)") {
    CHECK(total_parameters(load_model("gpt2-small")) == 124439808.0);
  }
  SECTION("GPT-3 175B: 12 l h^2 + 13 l h + (V + s) h + 2h = 174,604,259,328") {
    CHECK(total_parameters(load_model("gpt3-175b")) == 174604259328.0);
  }
}
