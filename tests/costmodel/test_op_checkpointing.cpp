// Checkpointing::op: torchtitan's op-level selective checkpointing (selective_ac_option
// "op", models/llama3/parallelize_llama.py: save the outputs of aten.mm and the attention
// kernel but every second mm, recompute the rest). Expectations written out by hand for
// LLaMA-3 8B (hidden 4096, 32 heads, 8 KV heads of 128, SwiGLU 14336) at 8192 tokens.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;

namespace {
Job llama_job(const std::string& policy, int tensor = 1) {
  return parse_job("model: {base: llama-3-8b, seq_len: 8192}\n"
                   "cluster: {instance_type: p5.48xlarge, nodes: 1}\n"
                   "training: {global_batch: 8, precision: bf16}\n"
                   "parallel: {flash_attention: true, activation_checkpointing: " +
                       policy + ", tensor_parallel_degree: " + std::to_string(tensor) + "}\n",
                   "op.yaml");
}
constexpr double T = 8192, h = 4096, kv = 1024, f = 14336, heads = 32;
}  // namespace

TEST_CASE("op checkpointing keeps the layer's input, wq, wv, w1, w2 and the attention output", "[checkpointing]") {
  const Job j = llama_job("op");
  const LayerPlan plan = transformer_layer_plan(j.model, plan_config(j));
  // Kept, bf16: the block's input T h, the matmuls wq (h), wv (kv), w1 (f), w2 (h), and
  // SDPA's output (h) with its log-sum-exp (fp32, a head a token).
  const double kept = 2.0 * T * h + 2.0 * T * (h + kv + f + h) + 2.0 * T * h + 4.0 * T * heads;
  CHECK(plan.stored_bytes(Checkpointing::op) == Approx(kept));
  // Repeated in backward: wk, wo and w3, 2 T h (kv + h + f) FLOPs; not the attention kernel.
  CHECK(plan.recomputed_flops(Checkpointing::op) == Approx(2.0 * T * h * (kv + h + f)));
  // Between selective (Korthikanti: the attention core only, nothing with flash) and full.
  CHECK(plan.stored_bytes(Checkpointing::op) < plan.stored_bytes(Checkpointing::selective));
  CHECK(plan.stored_bytes(Checkpointing::op) > plan.stored_bytes(Checkpointing::full));
  CHECK(plan.recomputed_flops(Checkpointing::op) > plan.recomputed_flops(Checkpointing::selective));
  CHECK(plan.recomputed_flops(Checkpointing::op) < plan.recomputed_flops(Checkpointing::full));
}

TEST_CASE("op checkpointing over a tensor group keeps each rank's share", "[checkpointing]") {
  const Job j = llama_job("op", 2);
  const LayerPlan plan = transformer_layer_plan(j.model, plan_config(j));
  // Data 4 x tensor 2: a micro-batch of 2 sequences, 2T tokens. Without sequence
  // parallelism the input is whole; the column-parallel outputs (wq, wv, w1, SDPA) are
  // halves; w2's row-parallel output is the whole partial sum.
  const double T2 = 2 * T;
  const double kept = 2.0 * T2 * h + 2.0 * T2 * (h / 2 + kv / 2 + f / 2 + h) + 2.0 * T2 * h / 2 + 4.0 * T2 * heads / 2;
  CHECK(plan.stored_bytes(Checkpointing::op) == Approx(kept));
  CHECK(plan.recomputed_flops(Checkpointing::op) == Approx(2.0 * T2 * h * (kv + h + f) / 2));
}

TEST_CASE("op checkpointing: the recompute's time, the estimate, the key and the backend's refusal", "[checkpointing]") {
  const Job op = llama_job("op"), none = llama_job("none");
  const GpuProfile& gpu = op.cluster.instance.gpu;
  const LayerTime t = plan_time(gpu, transformer_layer_plan(op.model, plan_config(op)), Precision::bf16, true);
  // Some of the forward again: more than the three matmuls' share of its GEMM time (the
  // element-wise ops are repeated too), less than the whole forward.
  CHECK(t.recompute(Checkpointing::op) > t.gemm_fwd * (kv + h + f) / (h + 2 * kv + h + 3 * f) * 0.9);
  CHECK(t.recompute(Checkpointing::op) < t.forward());
  const Estimate e_op = estimate(op), e_none = estimate(none);
  CHECK(e_op.step_time > e_none.step_time);
  CHECK(e_op.memory.activations < e_none.memory.activations);
  CHECK(parse_job(job_yaml(op, "again"), "again.yaml").parallel.activation_checkpointing == Checkpointing::op);
}

// Checkpointing::dots: JAX's checkpoint_dots as MaxText's remat_policy minimal_flash runs it
// (every weight matmul's output and the attention context kept). LLaMA-2 7B (hidden 4096,
// 32 heads without grouping, SwiGLU 11008) at 4096 tokens.
TEST_CASE("dots checkpointing keeps every matmul's output and repeats only the element-wise ops", "[checkpointing]") {
  const Job j = parse_job("model: {base: llama-2-7b, seq_len: 4096}\n"
                          "cluster: {instance_type: p5.48xlarge, nodes: 1}\n"
                          "training: {global_batch: 8, precision: bf16}\n"
                          "parallel: {flash_attention: true, activation_checkpointing: dots}\n",
                          "dots.yaml");
  const LayerPlan plan = transformer_layer_plan(j.model, plan_config(j));
  const double t = 4096, hd = 4096, ff = 11008;
  // The input, q k v (3h), wo (h), w1 and w3 (2f), w2 (h), the context (h) and its
  // log-sum-exp (fp32, 32 heads).
  const double kept = 2.0 * t * hd + 2.0 * t * (3 * hd + hd + 2 * ff + hd) + 2.0 * t * hd + 4.0 * t * 32;
  CHECK(plan.stored_bytes(Checkpointing::dots) == Approx(kept));
  CHECK(plan.recomputed_flops(Checkpointing::dots) == 0);
  const LayerTime lt = plan_time(j.cluster.instance.gpu, plan, Precision::bf16, true);
  CHECK(lt.recompute(Checkpointing::dots) > 0);
  CHECK(lt.recompute(Checkpointing::dots) < lt.elementwise_fwd + 1e-12);
  CHECK(plan.stored_bytes(Checkpointing::dots) > plan.stored_bytes(Checkpointing::op));
}
