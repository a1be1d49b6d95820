// The attention half of a layer (plan_builder.hpp): multi-head, grouped-query and
// multi-query attention (QKV, the core, the projection), and DeepSeek's multi-head latent
// attention (down projections to a latent, its norms, up projections, the core, the
// projection), with the region edges around them. Units as layer_plan.cpp's.
#include "plan_builder.hpp"

namespace partune::detail {

namespace {

// The widths the attention core works on, per head: the query/key contraction and the
// value width, and how many key and value heads it reads.
struct CoreWidths {
  double qk = 0, v = 0, key_heads = 0, value_heads = 0;
};

// Q K^T and softmax(.) V over the rank's heads. Keeps Q, K, V (their projection's output,
// needed to recompute the core) always, and the s x s scores (softmax output 2, dropout
// mask 1, dropout output 2 bytes an element; the softmax output alone without dropout)
// unless FlashAttention recomputes them.
PlanOp attention_core(const ModelSpec& m, const PlanConfig& c, double tokens, double scale, const CoreWidths& w) {
  const double t = c.tensor_degree, s = m.seq_len, b = c.sequences, H = m.heads / t;
  // A context rank's share of the s x s pairs: its s / cp queries against every key (p2p,
  // allgather), or every query of its heads / cp (a2a) - the same count.
  const double sq = s / std::max(1, c.context_degree);
  PlanOp op;
  op.role = PlanOpRole::attention;
  op.kind = PlanOpKind::attention_core;
  // Q K^T and the context, all of the rank's heads, over the pairs a window keeps.
  op.score_fraction = m.attention_span_fraction();
  op.flops = 2.0 * b * sq * s * H * (w.qk + w.v) * op.score_fraction;
  op.m = b * H * sq * s;  // score elements
  op.k = w.qk;
  // One kernel call's keys: the whole sequence (all-gather gathers it, a2a gives the rank
  // whole sequences of its heads), or the ring's block: s / cp under p2p, an a2a sub-group's
  // a s / cp under a2a+p2p.
  const int cp = std::max(1, c.context_degree);
  op.seq = c.context_comm == ContextComm::p2p           ? s / cp
           : c.context_comm == ContextComm::a2a_p2p ? s * std::max(1, c.context_a2a_degree) / cp
                                                      : s;
  op.attention_kernel = c.attention_impl;
  op.params = m.attention_sinks ? H : 0.0;  // a sink logit per head, split with the heads
  op.stored = 2.0 * tokens * (H * w.qk + (w.key_heads * w.qk + w.value_heads * w.v) / t) * scale;
  // Without dropout only the softmax output stays (its backward needs nothing else).
  const double per_score = m.has_dropout() ? 5.0 : 2.0;
  op.recomputable = c.flash_attention ? 0.0 : per_score * m.heads * sq * s * b / t * scale;
  op.selective_recompute = true;
  return op;
}

// Context parallelism's exchange around the core (none without it). Per token of the
// rank's s / cp and tensor rank: keys and values of (key_heads qk + value_heads v) / t
// elements; queries H qk; the context H v. p2p and allgather move the context group's
// keys and values (S = cp x the rank's); a2a sends the rank's Q, K and V and gets its
// heads' share of every token, then sends the context back. a2a+p2p runs the a2a over
// its sub-group of a ranks, after which a rank holds H / a heads of a T tokens: the same
// key/value bytes as before, passed around the ring of cp / a sub-groups.
void context_exchange(PlanBuilder& p, const CoreWidths& w, PlanOpRole role) {
  const PlanConfig& c = p.c;
  if (c.context_degree <= 1) return;
  const double eb = bytes_per_element(c.precision), t = p.t, H = p.m.heads / t, T = p.tokens;
  const double kv = (w.key_heads * w.qk + w.value_heads * w.v) / t;
  const bool hierarchical = c.context_comm == ContextComm::a2a_p2p;
  const auto push = [&](PlanOpRole r, ContextComm kind, double bytes, bool sub_group) {
    p.context_comm(r, kind, bytes, sub_group);
  };
  if (role == PlanOpRole::context_in) {
    if (c.context_comm == ContextComm::p2p || c.context_comm == ContextComm::allgather)
      push(role, c.context_comm, c.context_degree * T * kv * eb, false);
    if (c.context_comm == ContextComm::a2a || hierarchical)
      push(role, ContextComm::a2a, T * (H * w.qk + kv) * eb, hierarchical);
    if (hierarchical)
      push(PlanOpRole::context_ring, ContextComm::p2p,
           static_cast<double>(c.context_degree) / std::max(1, c.context_a2a_degree) * T * kv * eb, false);
  } else if (c.context_comm == ContextComm::a2a || hierarchical) {
    push(role, ContextComm::a2a, T * H * w.v * eb, hierarchical);
  }
}

// The core with context parallelism's exchanges before and after it.
void core_with_context(PlanBuilder& p, const CoreWidths& w) {
  context_exchange(p, w, PlanOpRole::context_in);
  p.plan.ops.push_back(attention_core(p.m, p.c, p.tokens, p.scale, w));
  const double t = p.t, T = p.tokens, q = T * p.m.heads * w.v / t, kv = T * w.key_heads * w.qk / t;
  p.eager_extra(eager_attention_layout(q, kv, p.element_bytes()));
  if (p.eager_kernels() && !p.c.flash_attention) {
    PlanOp& core = p.plan.ops.back();
    // (Every score, a sliding window's masked ones too.)
    p.eager_extra(eager_score_passes(core.m / core.score_fraction, q, kv, p.element_bytes()));
    core.score_passes_in_work = true;
  }
  context_exchange(p, w, PlanOpRole::context_out);
}

// After the core: the output projection (its bias replicated), the exit edge, the
// residual, the MLP's norm and the edge entering the MLP region. `context` is the
// core's output width on the whole layer (heads x value width).
void attention_exit(PlanBuilder& p, double context) {
  const ModelSpec& m = p.m;
  const double h = m.hidden, t = p.t, T = p.tokens, Ts = p.seq_tokens;
  const double b = m.bias ? 1.0 : 0.0, eb = p.element_bytes();
  p.gemm(PlanOpRole::projection, context / t, h, 2.0 * T * context / t, b * h);
  if (m.bias) p.shard_gradient(h);  // its bias, added after the reduce-scatter
  p.comm(PlanOpRole::attention_out, p.exit(), p.activation_bytes());
  // Bias, dropout and residual add: reads two inputs, writes the output and a 1-byte mask
  // (7h bytes a token); keeps the mask. Without dropout: no mask (6h, nothing kept).
  p.memory_bound(PlanOpRole::attention_dropout_residual, (6.0 + p.mask()) * Ts * h, 2, p.mask() * Ts * h,
                 eager_residual(Ts * h, eb, m.has_dropout()));
  p.memory_bound(PlanOpRole::mlp_norm, 4.0 * Ts * h, 2, 2.0 * Ts * h, eager_norm(m.norm, Ts * h, eb));
  p.holds_norm(h);
  p.shard_gradient(norm_params(m));
  p.comm(PlanOpRole::mlp_in, p.entry(), p.activation_bytes());
}

// The norm before attention: reads and writes h per token (4h bytes), keeps its input.
void input_norm(PlanBuilder& p) {
  const double h = p.m.hidden, Ts = p.seq_tokens;
  p.plan.input_bytes = 2.0 * Ts * h * p.scale;
  p.memory_bound(PlanOpRole::input_norm, 4.0 * Ts * h, 2, 2.0 * Ts * h, eager_norm(p.m.norm, Ts * h, p.element_bytes()));
  p.holds_norm(h);
  p.shard_gradient(norm_params(p.m));  // scale (and shift)
}

// Multi-head latent attention (Megatron-core's MLASelfAttention over a tensor group of
// t). The down projections to the latents are whole on every tensor rank (duplicated
// linears) and run on the rank's rows: with sequence parallelism its sequence shard, and
// then the latent (not the hidden state) is all-gathered entering the region; without,
// the region's f comes first. Each rank's gradient of the duplicated weights and the
// latent norms covers its heads (or its shard): summed over the tensor group. The up
// projections and the output projection are split by heads as QKV and the projection
// are.
void mla_attention(PlanBuilder& p) {
  const ModelSpec& m = p.m;
  const double h = m.hidden, t = p.t, T = p.tokens, Ts = p.seq_tokens, H = m.heads / t;
  const double ql = m.q_lora_rank, kl = m.kv_lora_rank, dr = m.qk_rope_head_dim, dv = m.v_head_dim;
  const double dqk = m.head_dim();
  // The op just added is whole on every tensor rank: its gradient is summed over the group.
  const auto replicated = [&] {
    if (t > 1) p.plan.ops.back().shard_gradient_params = p.plan.ops.back().params;
  };
  input_norm(p);
  if (!p.c.sequence_parallel) p.comm(PlanOpRole::attention_in, Conjugate::f, p.activation_bytes());
  // Queries: a latent of ql (whole) then its up projection, or one projection by heads.
  if (ql > 0) {
    p.gemm_rows(PlanOpRole::q_down, h, ql, 2.0 * Ts * h, Ts);
    replicated();
  }
  // Keys and values: a latent of kl and the shared rotary key (dr), whole (its input is
  // the queries' down projection's, kept once).
  p.gemm_rows(PlanOpRole::kv_down, h, kl + dr, ql > 0 ? 0.0 : 2.0 * Ts * h, Ts);
  replicated();
  const double latent = ql + kl + dr;  // what each token's down projections write
  if (p.c.sequence_parallel)
    p.comm(PlanOpRole::attention_in, Conjugate::sp_gather, T * latent * bytes_per_element(p.c.precision));
  // The latents' RMSNorms (ql and kl), whole, keeping their inputs.
  p.memory_bound(PlanOpRole::latent_norm, 4.0 * T * (ql + kl), 2, 2.0 * T * (ql + kl),
                 eager_norm(NormKind::rmsnorm, T * (ql + kl), p.element_bytes()));
  p.holds(ql + kl, ql > 0 ? 2 : 1);
  replicated();
  if (ql > 0)
    p.gemm(PlanOpRole::q_up, ql, H * dqk, 2.0 * T * ql, 0.0);
  else
    p.gemm(PlanOpRole::q_up, h, H * dqk, 2.0 * Ts * h, 0.0);  // from the hidden state, by heads
  p.gemm(PlanOpRole::kv_up, kl, H * (m.qk_nope_head_dim + dv), 2.0 * T * kl, 0.0);
  // Rotary positions on the queries' rotary part and the shared rotary key.
  p.memory_bound(PlanOpRole::rotary, 4.0 * T * (H * dr + dr), 2, 0.0, eager_rotary(T * (H * dr + dr), p.element_bytes()));
  core_with_context(p, {dqk, dv, m.heads * 1.0, m.heads * 1.0});
  attention_exit(p, m.heads * dv);
}

}  // namespace

// The attention half of a layer: its norm, QKV, the core, the projection and the
// residual, with the region edges around them (multi-head latent attention: mla_attention).
void attention_half(PlanBuilder& p) {
  const ModelSpec& m = p.m;
  if (m.is_mla()) return mla_attention(p);
  const double h = m.hidden, q = m.query_width(), t = p.t, T = p.tokens, Ts = p.seq_tokens;
  const double d = m.head_dim(), kv = static_cast<double>(m.kv_heads) * d;
  const double b = m.bias ? 1.0 : 0.0;
  input_norm(p);
  p.comm(PlanOpRole::attention_in, p.entry(), p.activation_bytes());
  // A column-parallel GEMM's input is the sequence shard with sequence parallelism (it is
  // all-gathered again in backward), else the whole input. Queries of heads x head_dim
  // (query_width: hidden unless head_dim is set apart).
  p.gemm(PlanOpRole::qkv, h, (q + 2.0 * kv) / t, 2.0 * Ts * h, b * (q + 2.0 * kv) / t);
  // QK-norm: an RMSNorm of each of the rank's query and key heads, read and written once,
  // keeping its input. Its two scales are whole on every tensor rank, but each rank's
  // gradient covers its own heads only: summed over the tensor group like the sequence-
  // parallel parameters (with or without sequence parallelism).
  if (m.qk_norm) {
    p.memory_bound(PlanOpRole::qk_norm, 4.0 * T * (q + kv) / t, 2, 2.0 * T * (q + kv) / t,
                   eager_norm(NormKind::rmsnorm, T * (q + kv) / t, p.element_bytes()));
    p.holds(2.0 * d, 2);
    if (t > 1) p.plan.ops.back().shard_gradient_params = 2.0 * d;
  }
  // Rotary positions rotate the rank's queries and keys in place, read and written once
  // (their backward is the inverse rotation: nothing kept).
  if (m.positions == PositionKind::rope) {
    PassWork rotary = eager_rotary(T * q / t, p.element_bytes());
    const PassWork keys = eager_rotary(T * kv / t, p.element_bytes());
    rotary.forward += keys.forward;
    rotary.backward += keys.backward;
    p.memory_bound(PlanOpRole::rotary, 4.0 * T * (q + kv) / t, 2, 0.0, rotary);
  }
  core_with_context(p, {d, d, 1.0 * m.kv_heads, 1.0 * m.kv_heads});
  attention_exit(p, q);
}

}  // namespace partune::detail
