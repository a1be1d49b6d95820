// Megatron-Core's selective recomputation by module (job.hpp's RecomputeModule,
// module_checkpointing.cpp) on a small multi-head latent attention model, each byte and
// FLOP written out by hand: tokens T = 128 (one sequence), hidden 256, 4 heads, query and
// key head dim 32 + 16 = 48, value head dim 32, latents 64 (queries) and 32 (keys and
// values), a GeLU MLP of 512, bf16, FlashAttention, one tensor rank.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;

namespace {

Job mla(const std::string& parallel) {
  return parse_job(
      "kind: job\nname: t\n"
      "model: {name: tiny-mla, layers: 2, hidden: 256, heads: 4, attention: mla, q_lora_rank: 64, kv_lora_rank: 32,\n"
      "        qk_nope_head_dim: 32, qk_rope_head_dim: 16, v_head_dim: 32, ffn_hidden: 512, vocab: 1000, seq_len: 128,\n"
      "        mlp: gelu, norm: rmsnorm, positions: rope, bias: false, dropout: 0}\n"
      "cluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
      "training: {global_batch: 8, precision: bf16}\n"
      "parallel: {flash_attention: true, " +
          parallel + "}\n",
      "modules.yaml");
}

LayerPlan plan(const Job& j) { return transformer_layer_plan(j.model, plan_config(j)); }

}  // namespace

TEST_CASE("recompute_modules: each module's bytes and FLOPs by hand", "[checkpointing][modules]") {
  const double T = 128, h = 256, f = 512;
  const Job none = mla("activation_checkpointing: none");
  const double all = plan(none).stored_bytes(Checkpointing::none);
  // Megatron's default list (core_attn): with FlashAttention nothing to drop, the core
  // repeated: its forward FLOPs 2 T s H (48 + 32) = 2 x 128 x 128 x 4 x 80.
  const Job core = mla("activation_checkpointing: selective");
  CHECK(plan(core).stored_bytes(Checkpointing::selective) == all);
  CHECK(plan(core).recomputed_flops(Checkpointing::selective) == 2.0 * T * T * 4 * 80);
  // mla_up_proj: the core's queries, keys and values (T (4 x 48 + 4 x 48 + 4 x 32) bf16
  // elements) freed, the up projections repeated: 2 T x 64 x (4 x 48) and 2 T x 32 x
  // (4 x (32 + 32)) FLOPs; the core itself not.
  const Job up = mla("activation_checkpointing: selective, recompute_modules: [mla_up_proj]");
  CHECK(all - plan(up).stored_bytes(Checkpointing::selective) == 2.0 * T * (192 + 192 + 128));
  CHECK(plan(up).recomputed_flops(Checkpointing::selective) == 2.0 * T * 64 * 192 + 2.0 * T * 32 * 256);
  // layernorm: the two norms' outputs (the down projections' and fc1's inputs) freed.
  const Job norms = mla("activation_checkpointing: selective, recompute_modules: [layernorm]");
  CHECK(all - plan(norms).stored_bytes(Checkpointing::selective) == 2 * (2.0 * T * h));
  CHECK(plan(norms).recomputed_flops(Checkpointing::selective) == 0);  // norms: memory-bound
  // mlp: the MLP keeps its input; GeLU's input and fc2's input (2 T f bytes each) freed;
  // fc1 and fc2 repeated (2 T h f FLOPs each).
  const Job mlp = mla("activation_checkpointing: selective, recompute_modules: [mlp]");
  CHECK(all - plan(mlp).stored_bytes(Checkpointing::selective) == 2 * (2.0 * T * f));
  CHECK(plan(mlp).recomputed_flops(Checkpointing::selective) == 2 * (2.0 * T * h * f));
}

TEST_CASE("recompute_modules: read, written, and refused where they name nothing", "[checkpointing][modules]") {
  const Job two = mla("activation_checkpointing: selective, recompute_modules: [mla_up_proj, mlp]");
  CHECK(two.parallel.recompute_modules ==
        (module_bit(RecomputeModule::mla_up_proj) | module_bit(RecomputeModule::mlp)));
  CHECK_THAT(job_yaml(two, "test"), Catch::Contains("recompute_modules: [mla_up_proj, mlp]"));
  CHECK(parse_job(job_yaml(two, "test"), "again.yaml").parallel.recompute_modules == two.parallel.recompute_modules);
  auto refusal = [](const std::string& parallel) {
    try {
      mla(parallel);
    } catch (const ScenarioError& e) {
      return e.key() + ": " + e.reason();
    }
    return std::string("accepted");
  };
  CHECK_THAT(refusal("recompute_modules: [mlp]"), Catch::Contains("activation_checkpointing: selective"));
  CHECK_THAT(refusal("activation_checkpointing: selective, recompute_modules: [mlpp]"),
             Catch::Contains("'mlpp' is not one of") && Catch::Contains("mla_up_proj"));
  CHECK_THAT(refusal("activation_checkpointing: selective, recompute_modules: [moe]"),
             Catch::StartsWith("parallel.recompute_modules") && Catch::Contains("mixture of experts"));
}
