// The scaled job and the model-size scaling rule (scaled_job.hpp).
#include "partune/costmodel/scaled_job.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/parameter_count.hpp"

namespace partune {

namespace {

// The key/value heads at `heads` query heads (the rule in scaled_job.hpp).
int scaled_kv_heads(const ModelSpec& model, int heads, int min_kv_heads) {
  switch (model.attention) {
    case AttentionKind::mha: return heads;
    case AttentionKind::mqa: return 1;
    case AttentionKind::mla: return heads;  // every head its own keys and values
    case AttentionKind::gqa: break;
  }
  if (heads == model.heads) return model.kv_heads;
  int kv = std::max({1, min_kv_heads, model.heads > 0 ? heads * model.kv_heads / model.heads : 1});
  while (kv < heads && heads % kv != 0) ++kv;
  return std::min(kv, heads);
}

// Multi-head latent attention's widths: the model's when its hidden size and heads are
// kept, else from the scaled head width d = hidden / heads: nope d, rope d/2 (even, at
// least 2), values d, the key/value latent hidden/4 and the query latent hidden/2 (none if
// the model has none).
void scale_latent_attention(const ModelSpec& model, ModelSpec& c) {
  if (c.hidden == model.hidden && c.heads == model.heads) {
    c.q_lora_rank = model.q_lora_rank;
    c.kv_lora_rank = model.kv_lora_rank;
    c.qk_rope_head_dim = model.qk_rope_head_dim;
    c.qk_nope_head_dim = model.qk_nope_head_dim;
    c.v_head_dim = model.v_head_dim;
    return;
  }
  const int d = std::max(2, c.hidden / c.heads);
  c.qk_nope_head_dim = d;
  c.qk_rope_head_dim = std::max(2, d / 2 / 2 * 2);
  c.v_head_dim = d;
  c.kv_lora_rank = std::max(1, c.hidden / 4);
  c.q_lora_rank = model.q_lora_rank > 0 ? std::max(1, c.hidden / 2) : 0;
}


// Whether `ran` has `model`'s sizes and block (else its name says "-scaled").
bool same_model(const ModelSpec& m, const ModelSpec& c) {
  return m.layers == c.layers && m.hidden == c.hidden && m.heads == c.heads && m.kv_heads == c.kv_heads &&
         m.head_dim() == c.head_dim() && m.qk_norm == c.qk_norm && m.sliding_window == c.sliding_window &&
         m.attention_sinks == c.attention_sinks && m.q_lora_rank == c.q_lora_rank &&
         m.kv_lora_rank == c.kv_lora_rank && m.v_head_dim == c.v_head_dim && m.ffn_hidden == c.ffn_hidden &&
         m.vocab == c.vocab && m.seq_len == c.seq_len && m.attention == c.attention && m.mlp == c.mlp &&
         m.norm == c.norm && m.positions == c.positions && m.bias == c.bias &&
         m.expert_ffn_hidden == c.expert_ffn_hidden && m.shared_expert_ffn_hidden == c.shared_expert_ffn_hidden &&
         m.first_dense_layers == c.first_dense_layers;
}

// The sizes by the rule (scaled_job.hpp): layers, hidden, sequence, vocabulary and heads.
void scale_sizes(const ModelSpec& model, const ScaleOptions& scale, bool small, ModelSpec& c) {
  c.layers = scale.layers > 0 ? scale.layers : small ? model.layers : 2;
  c.hidden = scale.hidden > 0 ? scale.hidden : small ? model.hidden : 64;
  c.seq_len = scale.seq_len > 0 ? scale.seq_len : small ? model.seq_len : 32;
  c.vocab = scale.vocab > 0 ? scale.vocab : small ? model.vocab : 256;
  if (scale.heads > 0) {
    c.heads = scale.heads;
  } else if (small && c.hidden == model.hidden) {
    c.heads = model.heads;
  } else {
    c.heads = 4;
    while (c.heads > 1 && c.hidden % c.heads != 0) --c.heads;
  }
}

// Experts as the job has them; their width follows the hidden size as ffn_hidden does.
void scale_experts(const ModelSpec& model, ModelSpec& c) {
  c.expert_ffn_hidden = !model.is_moe() ? 0 : c.hidden == model.hidden ? model.expert_ffn_hidden : 4 * c.hidden;
  // Shared experts as the routed ones: kept with the hidden size, else one expert's width.
  c.shared_expert_ffn_hidden = !model.is_moe() || model.shared_expert_ffn_hidden == 0 ? 0
                               : c.hidden == model.hidden                            ? model.shared_expert_ffn_hidden
                                                                                     : c.expert_ffn_hidden;
  // Dense first layers as the model has them; fewer layers keep at least one with experts.
  c.first_dense_layers = !model.is_moe()             ? 0
                         : c.layers == model.layers ? model.first_dense_layers
                                                    : std::min(model.first_dense_layers, c.layers - 1);
}

void check_scaled(const ModelSpec& c) {
  if (c.layers < 1 || c.hidden < 1 || c.heads < 1 || c.seq_len < 1 || c.vocab < 2)
    throw std::invalid_argument(fmt::format("scaled model: every size must be >= 1 (vocab >= 2): {} layers, hidden {}, "
                                            "{} heads, seq {}, vocab {}",
                                            c.layers, c.hidden, c.heads, c.seq_len, c.vocab));
  if (c.attention_head_dim == 0 && c.attention != AttentionKind::mla && c.hidden % c.heads != 0)
    throw std::invalid_argument(
        fmt::format("scaled model: {} heads do not divide hidden {} (use --scale-heads)", c.heads, c.hidden));
  if (c.positions == PositionKind::rope && c.attention != AttentionKind::mla && c.head_dim() % 2 != 0)
    throw std::invalid_argument(fmt::format(
        "scaled model: rotary positions rotate pairs of a head's dimensions; head dim {} is odd (use --scale-heads)",
        c.head_dim()));
}

}  // namespace

ModelSpec scaled_model(const ModelSpec& model, const ScaleOptions& scale, int min_kv_heads) {
  // (The sizes first: the plans behind total_parameters divide by the heads.)
  const bool small = model.layers >= 1 && model.hidden >= 1 && model.heads >= 1 &&
                     (scale.whole || (total_parameters(model) <= kSmallModelParams && model.seq_len <= kSmallSeqLen));
  ModelSpec c = model;  // the block's variants, the window, the sinks and the experts as the model has them
  scale_sizes(model, scale, small, c);
  // A head width set apart stays with the model's own heads (scaled: hidden / heads).
  const bool heads_kept = c.hidden == model.hidden && c.heads == model.heads;
  c.attention_head_dim = heads_kept ? model.attention_head_dim : 0;
  c.ffn_hidden = (c.hidden == model.hidden && model.ffn_hidden > 0) ? model.ffn_hidden : 4 * c.hidden;
  c.kv_heads = c.heads >= 1 ? scaled_kv_heads(model, c.heads, min_kv_heads) : 1;
  c.q_lora_rank = c.kv_lora_rank = c.qk_rope_head_dim = c.qk_nope_head_dim = c.v_head_dim = 0;
  if (model.is_mla()) scale_latent_attention(model, c);
  scale_experts(model, c);
  check_scaled(c);
  if (!same_model(model, c)) c.name += "-scaled";
  return c;
}

Job scaled_job(const Job& job, const ScaleOptions& scale) {
  Job j = job;
  j.model = scaled_model(job.model, scale, job.parallel.tensor_parallel_degree);
  // The backend shards every parameter tensor and gathers each layer (no tensor stays
  // whole: the backend's executor_collectives.cpp), so the program it runs has SMP's and
  // ZeRO-3's persistence threshold at 0; and it copies each gathered layer out of the
  // all-gather's rows and its gradients into the reduce's (parameter_shards.cpp's
  // unpack_parameters, pack_gradients) as FSDP2 does, whatever the flavour.
  if (j.parallel.sharded_data_parallel_degree > 1) {
    if (!layer_unit(j.parallel.sharding_flavor)) j.parallel.sharding.param_persistence_threshold = 0;
    j.parallel.sharding.gather_copies = 1;
  }
  return j;
}

namespace {

// What differs from the GPT block: "swiglu, rmsnorm, rope, gqa 2 kv heads, no bias, " (empty for GPT's).
std::string block_variants(const ModelSpec& c) {
  std::string s;
  if (c.mlp != MlpKind::gelu) s += fmt::format("{}, ", enum_name(c.mlp));
  if (c.norm != NormKind::layernorm) s += fmt::format("{}, ", enum_name(c.norm));
  if (c.positions != PositionKind::learned) s += fmt::format("{}, ", enum_name(c.positions));
  if (c.attention != AttentionKind::mha)
    s += fmt::format("{} {} kv head{}, ", enum_name(c.attention), c.kv_heads, c.kv_heads == 1 ? "" : "s");
  if (!c.bias) s += "no bias, ";
  if (c.experts > 0)
    s += fmt::format("{} experts of {} ({} a token, {}), ", c.experts, c.expert_ffn_hidden, c.experts_per_token,
                     c.moe_every == 1 ? std::string("every layer") : fmt::format("layers 0, {}, ...", c.moe_every));
  if (c.experts > 0 && c.shared_expert_ffn_hidden > 0) s += fmt::format("shared experts of {}, ", c.shared_expert_ffn_hidden);
  if (c.experts > 0 && c.first_dense_layers > 0) s += fmt::format("first {} layers dense, ", c.first_dense_layers);
  if (c.qk_norm) s += "qk-norm, ";
  if (c.sliding_window > 0)
    s += fmt::format("window {}{}, ", c.sliding_window,
                     c.full_attention_every > 0 ? fmt::format(" (every {}th layer full)", c.full_attention_every) : "");
  if (c.attention_sinks) s += "attention sinks, ";
  if (c.attention == AttentionKind::mla)
    s += fmt::format("latents q {} kv {}, head {}+{} value {}, ", c.q_lora_rank, c.kv_lora_rank, c.qk_nope_head_dim,
                     c.qk_rope_head_dim, c.v_head_dim);
  return s;
}

}  // namespace

std::string describe_model(const ModelSpec& c, bool flash_attention) {
  return fmt::format("{} layers, hidden {}, {} heads (head dim {}), ffn {}, vocab {}, seq {}, {}{}, {:.3f}M parameters{}",
                     c.layers, c.hidden, c.heads, c.heads > 0 ? c.head_dim() : 0, c.ffn_hidden, c.vocab,
                     c.seq_len, block_variants(c), c.tied_embeddings ? "tied embeddings" : "untied LM head",
                     total_parameters(c) / 1e6, flash_attention ? ", flash attention" : "");
}

namespace {

// "0.119M", "124M", "1.3B".
std::string parameter_count(double n) {
  return n >= 1e9 ? fmt::format("{:.3g}B", n / 1e9) : fmt::format("{:.3g}M", n / 1e6);
}

}  // namespace

std::string describe_scaling(const ModelSpec& model, const ModelSpec& ran, const ScaleOptions& scale) {
  const std::string sizes = fmt::format("{} layers, hidden {}, seq {}, {} parameters", ran.layers, ran.hidden,
                                        ran.seq_len, parameter_count(std::round(total_parameters(ran))));
  const bool as_written = ran.layers == model.layers && ran.hidden == model.hidden && ran.heads == model.heads &&
                          ran.seq_len == model.seq_len && ran.vocab == model.vocab;
  if (as_written) return fmt::format("runs {} as written: {}", model.name, sizes);
  const std::string written = parameter_count(total_parameters(model)) + " as written";
  const bool sizes_given = scale.layers > 0 || scale.hidden > 0 || scale.heads > 0 || scale.seq_len > 0 || scale.vocab > 0;
  if (sizes_given) return fmt::format("runs {} resized by --scale-*: {} ({})", model.name, sizes, written);
  return fmt::format(
      "runs a scaled-down {}: {} ({}), because run scales a model over {:g}M parameters or {} tokens down so that "
      "a CPU step takes seconds; --scale-whole runs it as written, --scale-layers/-hidden/-heads/-seq/-vocab set sizes",
      model.name, sizes, written, kSmallModelParams / 1e6, kSmallSeqLen);
}

}  // namespace partune
