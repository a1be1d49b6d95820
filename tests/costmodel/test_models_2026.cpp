// The models of 2026 (issue 30): a head width set apart from hidden / heads (`head_dim`),
// Qwen3's QK-norm, the Qwen3 presets and Hugging Face configs. Parameter counts and FLOPs
// against closed forms written out here and the published sizes (model cards); the keys'
// refusals; QK-norm's gradient sum over the tensor group.
#include <catch2/catch.hpp>

#include <string>

#include "job_fixtures.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;

namespace {

const std::string kHf = std::string(PARTUNE_SOURCE_DIR) + "/tests/costmodel/data/hf/";

Job job_with(const std::string& model) {
  return parse_job("kind: job\nname: t\nmodel:\n" + model +
                       "cluster: {instance_type: p5.48xlarge, nodes: 1}\ntraining: {global_batch: 8, precision: bf16}\n",
                   "inline.yaml");
}

}  // namespace

TEST_CASE("Qwen3-0.6B from its config: heads of 128 over a hidden size of 1024, QK-norm", "[model][hf][qwen3]") {
  const ModelSpec m = job_with("  from_hf: " + kHf + "qwen3-0.6b.json\n  seq_len: 4096\n").model;
  CHECK(m.head_dim() == 128);
  CHECK(m.query_width() == 2048);  // 16 heads x 128: twice the hidden size
  CHECK(m.qk_norm);
  CHECK(m.tied_embeddings);
  // Written out: per layer Q (1024 x 2048), K and V (1024 x 1024 each), the output
  // projection (2048 x 1024), SwiGLU (3 x 1024 x 3072), two RMSNorm scales of 1024 and
  // the QK-norm scales (2 x 128); the tied table 151936 x 1024 and the final norm.
  const double h = 1024, q = 2048, kv = 1024, f = 3072, V = 151936, L = 28, d = 128;
  const double layer = h * (q + 2 * kv) + q * h + 3 * h * f + 2 * h + 2 * d;
  CHECK(layer_parameters(m, false) == layer);
  CHECK(total_parameters(m) == L * layer + V * h + h);
  // The model card: 0.6B parameters, 0.44B of them not the embedding.
  CHECK(total_parameters(m) == Approx(0.6e9).epsilon(0.01));
  CHECK(total_parameters(m) - V * h == Approx(0.44e9).epsilon(0.01));
  // FLOPs per token: 2 per weight of the GEMMs, Q K^T and the context over the queries'
  // width (4 s q, the causal half not skipped), the logits; backward twice.
  const double s = 4096;
  const double per_layer = 2 * (h * (q + 2 * kv) + q * h + 3 * h * f) + 4 * s * q;
  CHECK(model_flops_per_step(m, 1) / s == Approx(3 * (L * per_layer + 2 * h * V)).epsilon(1e-12));
}

TEST_CASE("Qwen3 MoE presets have their published sizes and equal their configs", "[model][moe][qwen3]") {
  // Model cards: Qwen3-30B-A3B 30.5B in total, 3.3B activated; Qwen3-235B-A22B 235B, 22B.
  // The cards' figures keep two or three digits, cut rather than rounded: 30B-A3B's
  // activated count written out below is 3.353B ("3.3B"), so it is checked to lie in
  // [3.3, 3.4) billion; the others within 1%.
  const ModelSpec small = load_model("qwen3-30b-a3b");
  CHECK(total_parameters(small) == Approx(30.5e9).epsilon(0.01));
  CHECK(active_parameters(small) >= 3.3e9);
  CHECK(active_parameters(small) < 3.4e9);
  const ModelSpec big = load_model("qwen3-235b-a22b");
  CHECK(total_parameters(big) == Approx(235e9).epsilon(0.01));
  CHECK(active_parameters(big) == Approx(22e9).epsilon(0.01));
  // Written out for 30B-A3B: attention 2048 x (4096 + 2 x 512) + 4096 x 2048, the router
  // 2048 x 128, 128 experts of 3 x 2048 x 768, the norms and QK-norm; untied embeddings.
  const double h = 2048, q = 4096, kv = 512, E = 128, k = 8, fe = 768, V = 151936, L = 48;
  const double attention = h * (q + 2 * kv) + q * h, router = h * E, expert = 3 * h * fe, norms = 2 * h + 2 * 128;
  CHECK(total_parameters(small) == L * (attention + router + E * expert + norms) + 2 * V * h + h);
  CHECK(active_parameters(small) == L * (attention + router + k * expert + norms) + 2 * V * h + h);
  const ModelSpec hf = job_with("  from_hf: " + kHf + "qwen3-30b-a3b.json\n  seq_len: 4096\n").model;
  CHECK(hf.experts == 128);
  CHECK(hf.experts_per_token == 8);
  CHECK(hf.expert_ffn_hidden == 768);
  CHECK(total_parameters(hf) == total_parameters(small));
  CHECK(active_parameters(hf) == active_parameters(small));
}

TEST_CASE("head_dim: the keys, their refusals and the writer", "[model][scenario]") {
  const std::string base = "  name: m\n  layers: 2\n  hidden: 96\n  vocab: 64\n  seq_len: 16\n";
  // 5 heads do not divide 96: refused, naming head_dim as the way out; accepted with it.
  try {
    job_with(base + "  heads: 5\n");
    FAIL("5 heads over hidden 96 were accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "model.heads");
    CHECK(std::string(e.what()).find("head_dim") != std::string::npos);
  }
  const Job j = job_with(base + "  heads: 5\n  head_dim: 32\n  qk_norm: true\n");
  CHECK(j.model.query_width() == 160);
  CHECK(j.model.qk_norm);
  // GPT block (biases, LayerNorm, learned positions): QKV 96 x 480 + 480, proj 160 x 96 + 96.
  const double h = 96, q = 160, f = 384;
  CHECK(layer_parameters(j.model, false) ==
        (h * 3 * q + 3 * q) + (q * h + h) + (h * f + f) + (f * h + h) + 4 * h + 2 * 32);
  // Written and read back: the same model.
  const Job again = parse_job(job_yaml(j, "test"), "again.yaml");
  CHECK(again.model.head_dim() == 32);
  CHECK(again.model.qk_norm);
  CHECK(total_parameters(again.model) == total_parameters(j.model));
  try {
    job_with(base + "  heads: 4\n  head_dim: 0\n");
    FAIL("head_dim 0 was accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "model.head_dim");
  }
}

TEST_CASE("QK-norm's scales are summed over the tensor group at any tensor degree", "[model][plan][qwen3]") {
  ModelSpec m = load_model("qwen3-30b-a3b");
  PlanConfig c;
  c.tensor_degree = 1;
  CHECK(transformer_layer_plan(m, c).shard_gradient_params() == 0);
  c.tensor_degree = 4;
  // Without sequence parallelism only the two scales of 128 (heads split, scales whole).
  CHECK(transformer_layer_plan(m, c).shard_gradient_params() == 2 * 128);
  CHECK(transformer_layer_plan(m, c).op(PlanOpRole::qk_norm).params == 2 * 128);
  m.qk_norm = false;
  CHECK(transformer_layer_plan(m, c).find(PlanOpRole::qk_norm) == nullptr);
  CHECK(transformer_layer_plan(m, c).shard_gradient_params() == 0);
}

TEST_CASE("Shared experts and dense first layers: counts and FLOPs written out", "[model][moe]") {
  // LLaMA's block, hidden 64 (4 heads of 16, 2 key/value heads), 4 layers of which the
  // first is dense (SwiGLU of 176) and layers 1-3 have 4 experts of 32 (2 a token) and a
  // shared SwiGLU of 48; untied, vocab 100.
  const Job j = job_with(
      "  name: ds\n  layers: 4\n  hidden: 64\n  heads: 4\n  attention: gqa\n  kv_heads: 2\n  ffn_hidden: 176\n"
      "  vocab: 100\n  seq_len: 32\n  tied_embeddings: false\n  mlp: swiglu\n  norm: rmsnorm\n  positions: rope\n"
      "  bias: false\n  experts: 4\n  experts_per_token: 2\n  expert_ffn_hidden: 32\n  shared_expert_ffn_hidden: 48\n"
      "  first_dense_layers: 1\n");
  const ModelSpec& m = j.model;
  CHECK_FALSE(m.is_moe_layer(0));
  CHECK(m.is_moe_layer(1));
  CHECK(m.is_moe_layer(3));
  CHECK(m.moe_layers_in(0, 4) == 3);
  CHECK(m.moe_layers_in(0, 1) == 0);
  CHECK(m.moe_layers_in(1, 2) == 2);
  const double h = 64, kv = 32, f = 176, E = 4, fe = 32, fs = 48, V = 100;
  const double attention = h * (h + 2 * kv) + h * h, norms = 2 * h;
  const double dense = attention + 3 * h * f + norms;
  const double moe = attention + h * E + E * 3 * h * fe + 3 * h * fs + norms;
  CHECK(layer_parameters(m, false) == dense);
  CHECK(layer_parameters(m, true) == moe);
  CHECK(total_parameters(m) == dense + 3 * moe + 2 * V * h + h);
  // A token runs through the shared MLP and 2 of the 4 experts.
  CHECK(active_parameters(m) == dense + 3 * (moe - 2 * 3 * h * fe) + 2 * V * h + h);
  // FLOPs per token: 2 per weight a token runs through (router included), 4 s h of the
  // attention core, the logits; backward twice.
  const double s = 32, core = 4 * s * h;
  const double per_token = 3 * (2 * (attention + 3 * h * f) + core + 3 * (2 * (attention + h * E + 2 * 3 * h * fe + 3 * h * fs) + core) + 2 * h * V);
  CHECK(model_flops_per_step(m, 1) / s == Approx(per_token).epsilon(1e-12));
  // Tensor parallelism must divide the shared width too.
  try {
    parse_job("kind: job\nname: t\nmodel: {name: ds, layers: 2, hidden: 64, heads: 4, vocab: 100, seq_len: 32, "
              "experts: 4, expert_ffn_hidden: 32, shared_expert_ffn_hidden: 50}\n"
              "cluster: {instance_type: p5.48xlarge, nodes: 1}\ntraining: {global_batch: 8, precision: bf16}\n"
              "parallel: {tensor_parallel_degree: 4}\n",
              "inline.yaml");
    FAIL("tensor degree 4 over a shared width of 50 was accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "parallel.tensor_parallel_degree");
    CHECK(std::string(e.what()).find("shared_expert_ffn_hidden") != std::string::npos);
  }
  const std::string dense_key = "  name: d\n  layers: 2\n  hidden: 64\n  heads: 4\n  vocab: 100\n  seq_len: 32\n";
  try {
    job_with(dense_key + "  first_dense_layers: 1\n");
    FAIL("first_dense_layers without experts was accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "model.first_dense_layers");
  }
}

namespace {

// DeepSeek-V3's sizes, written out (the report's §4.2 and its config.json).
struct DeepSeekV3 {
  double h = 7168, H = 128, ql = 1536, kl = 512, dn = 128, dr = 64, dv = 128, f = 18432, E = 256, k = 8, fe = 2048,
         fs = 2048, V = 129280, dense = 3, moe = 58;
  // Q down and up, KV down (latent and the shared rotary key) and up, the output projection.
  double attention() const { return h * ql + ql * H * (dn + dr) + h * (kl + dr) + kl * H * (dn + dv) + H * dv * h; }
  double norms() const { return 2 * h + ql + kl; }  // the layer's two RMSNorms and the latents'
};

}  // namespace

TEST_CASE("DeepSeek-V3: multi-head latent attention, shared experts and dense first layers", "[model][moe][mla]") {
  const ModelSpec m = load_model("deepseek-v3");
  const DeepSeekV3 d;
  CHECK(m.is_mla());
  CHECK(m.head_dim() == 192);
  const double dense = d.attention() + 3 * d.h * d.f + d.norms();
  const double moe = d.attention() + d.h * d.E + d.E * 3 * d.h * d.fe + 3 * d.h * d.fs + d.norms();
  CHECK(layer_parameters(m, false) == dense);
  CHECK(layer_parameters(m, true) == moe);
  CHECK(total_parameters(m) == d.dense * dense + d.moe * moe + 2 * d.V * d.h + d.h);
  // The report: 671B in total, 37B activated. Its 37B is cut, not rounded (37.55B written
  // out: 8 routed and the shared expert a token), so [37, 38) billion.
  CHECK(total_parameters(m) == Approx(671e9).epsilon(0.01));
  CHECK(active_parameters(m) >= 37e9);
  CHECK(active_parameters(m) < 38e9);
  // FLOPs per token, forward: 2 per weight a token runs through (router included), the
  // core's Q K^T over 192 and the context over 128 per head (2 s H (dqk + dv), the causal
  // half not skipped), the logits; backward twice.
  const double s = 4096, core = 2 * s * d.H * (d.dn + d.dr + d.dv);
  const double dense_flops = 2 * (d.attention() + 3 * d.h * d.f) + core;
  const double moe_flops = 2 * (d.attention() + d.h * d.E + d.k * 3 * d.h * d.fe + 3 * d.h * d.fs) + core;
  const double per_token = 3 * (d.dense * dense_flops + d.moe * moe_flops + 2 * d.h * d.V);
  CHECK(model_flops_per_step(m, 1) / s == Approx(per_token).epsilon(1e-12));
  // From its config.json, without the multi-token prediction module (left out by the key).
  const ModelSpec hf = job_with("  from_hf: " + kHf + "deepseek-v3.json\n  seq_len: 4096\n  multi_token_prediction: false\n").model;
  CHECK(total_parameters(hf) == total_parameters(m));
  CHECK(active_parameters(hf) == active_parameters(m));
  CHECK(hf.first_dense_layers == 3);
  CHECK(hf.shared_expert_ffn_hidden == 2048);
  // Its node-limited routing: n_group 8, topk_group 4, as the preset writes it.
  CHECK(hf.router_groups == 8);
  CHECK(hf.router_group_topk == 4);
  CHECK(m.router_groups == hf.router_groups);
  CHECK(m.router_group_topk == hf.router_group_topk);
  // With it (num_nextn_predict_layers 1, the config's default reading): one depth of two
  // norms, the 2h x h projection, a layer with experts and its final norm; the embedding
  // and the output head shared. The released checkpoint's 685B less its copies of those two
  // (2 V h) is 683.4B.
  const ModelSpec with = job_with("  from_hf: " + kHf + "deepseek-v3.json\n  seq_len: 4096\n").model;
  CHECK(with.mtp_layers == 1);
  CHECK(total_parameters(with) - total_parameters(m) == 2 * d.h + 2 * d.h * d.h + moe + d.h);
  CHECK(total_parameters(with) + 2 * d.V * d.h == Approx(685e9).epsilon(0.005));
}

TEST_CASE("Multi-head latent attention over a tensor group, as Megatron-core splits it", "[model][plan][mla]") {
  ModelSpec m = load_model("deepseek-v3");
  const DeepSeekV3 d;
  PlanConfig c;
  c.tensor_degree = 8;
  c.precision = Precision::bf16;
  LayerPlan p = transformer_layer_plan(m, c);
  // The down projections and the latents' norms are whole on every rank (their gradients
  // summed over the group); the up projections and the output projection split by heads.
  const double whole = d.h * d.ql + d.h * (d.kl + d.dr) + d.ql + d.kl;
  CHECK(p.shard_gradient_params() == whole);
  CHECK(p.op(PlanOpRole::q_up).n == d.H / 8 * (d.dn + d.dr));
  CHECK(p.op(PlanOpRole::kv_up).n == d.H / 8 * (d.dn + d.dv));
  CHECK(p.op(PlanOpRole::projection).k == d.H / 8 * d.dv);
  CHECK(p.params() == whole + (d.ql * d.H * (d.dn + d.dr) + d.kl * d.H * (d.dn + d.dv) + d.H * d.dv * d.h) / 8 +
                          3 * d.h * d.f / 8 + 2 * d.h);
  // Without sequence parallelism the region's edge is the hidden state's f; with it the
  // latent (1536 + 512 + 64 a token) is all-gathered instead of the hidden state (7168).
  const double T = 4096;
  CHECK(p.op(PlanOpRole::attention_in).conjugate == Conjugate::f);
  CHECK(p.op(PlanOpRole::attention_in).comm_bytes == T * d.h * 2);
  c.sequence_parallel = true;
  p = transformer_layer_plan(m, c);
  CHECK(p.op(PlanOpRole::attention_in).conjugate == Conjugate::sp_gather);
  CHECK(p.op(PlanOpRole::attention_in).comm_bytes == T * (d.ql + d.kl + d.dr) * 2);
  CHECK(p.op(PlanOpRole::q_down).m == T / 8);  // the down projections run on the sequence shard
}

TEST_CASE("gpt-oss-120b: biases, sinks and alternating sliding windows", "[model][moe][window]") {
  const ModelSpec m = load_model("gpt-oss-120b");
  // Written out: attention Q (2880 x 4096), K and V (2880 x 512 each), the output
  // (4096 x 2880) with their biases and a sink per head; the router (2880 x 128); 128
  // experts of SwiGLU 2880 with biases (5760 and 2880); two RMSNorms; untied table.
  const double h = 2880, q = 4096, kv = 512, E = 128, fe = 2880, V = 201088, L = 36, H = 64;
  const double attention = h * (q + 2 * kv) + (q + 2 * kv) + q * h + h + H;
  const double expert = h * 2 * fe + 2 * fe + fe * h + h;
  const double layer = attention + h * E + E * expert + 2 * h;
  CHECK(layer_parameters(m, true) == layer);
  CHECK(total_parameters(m) == L * layer + 2 * V * h + h);
  // The model card: 116.8B in total, 5.1B active (without the embedding table).
  CHECK(total_parameters(m) == Approx(116.8e9).epsilon(0.01));
  CHECK(active_compute_parameters(m) == Approx(5.1e9).epsilon(0.01));
  CHECK(active_compute_parameters(m) == L * (layer - (E - 4) * expert) + V * h + h);
  CHECK(active_parameters(m) == active_compute_parameters(m) + V * h);
  // Half the layers see a window of 128 of the 4096 positions: their core counts
  // w (w + 1) + 2 (s - w) w of the s^2 pairs; the other half every pair.
  const double s = 4096, w = 128, windowed = (w * (w + 1) + 2 * (s - w) * w) / (s * s);
  CHECK(m.attention_span_fraction() == Approx((1 + windowed) / 2).epsilon(1e-12));
  CHECK_FALSE(m.is_full_attention_layer(0));
  CHECK(m.is_full_attention_layer(1));
  PlanConfig c;
  const LayerPlan p = moe_layer_plan(m, c);
  CHECK(p.attention_flops() == Approx(2 * s * s * H * 2 * 64 * (1 + windowed) / 2).epsilon(1e-12));
  // From its config.json: the same model (layer_types' alternation read as every 2nd full).
  const ModelSpec hf = job_with("  from_hf: " + kHf + "gpt-oss-120b.json\n  seq_len: 4096\n").model;
  CHECK(hf.sliding_window == 128);
  CHECK(hf.full_attention_every == 2);
  CHECK(hf.attention_sinks);
  CHECK(total_parameters(hf) == total_parameters(m));
  CHECK(hf.attention_span_fraction() == m.attention_span_fraction());
}
