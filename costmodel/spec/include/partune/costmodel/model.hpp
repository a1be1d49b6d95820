#pragma once
// A GPT-style decoder: embeddings, `layers` identical transformer layers, final norm
// and an LM head (tied to the input embedding or not).
#include <cstdint>
#include <string>

namespace partune {

// mla: DeepSeek-V2/V3's multi-head latent attention (ModelSpec's latent keys).
enum class AttentionKind { mha, gqa, mqa, mla };
const char* to_string(AttentionKind k);
// The MLP: gelu = GPT's fc1, GeLU, fc2 (two matrices); swiglu = LLaMA's
// down(silu(gate x) * up x) (three matrices, ffn_hidden each; LLaMA sizes it
// 2/3 x 4 hidden rounded up to a multiple of 256).
enum class MlpKind { gelu, swiglu };
// The norms: layernorm (scale and shift) or rmsnorm (scale only, no mean).
enum class NormKind { layernorm, rmsnorm };
// Positions: learned (a seq_len x hidden table added to the embedding) or rope (rotary,
// applied to the queries and keys in every layer; no parameters).
enum class PositionKind { learned, rope };

struct ModelSpec {
  std::string name;
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;        // = heads for mha, 1 for mqa
  int ffn_hidden = 0;      // usually 4 * hidden
  int vocab = 0;
  int seq_len = 0;
  bool tied_embeddings = true;
  AttentionKind attention = AttentionKind::mha;
  MlpKind mlp = MlpKind::gelu;
  NormKind norm = NormKind::layernorm;
  PositionKind positions = PositionKind::learned;
  bool bias = true;  // the linear layers' biases (GPT: yes; LLaMA: none)
  // Dropout probability of the attention scores and the residual branches. With 0 the
  // layer keeps no dropout masks and no dropped-out scores (Korthikanti's 5as²b becomes
  // the softmax output's 2as²b, and the two residual masks go).
  double dropout = 0.1;
  bool has_dropout() const { return dropout > 0.0; }
  // Mixture of experts (Shazeer et al. 2017; Switch, GShard, Mixtral): in every
  // `moe_every`-th layer (layers 0, k, 2k, ... as Megatron's --moe-layer-freq counts them)
  // the MLP is `experts` MLPs of `expert_ffn_hidden` (same `mlp` kind), of which a router
  // picks `experts_per_token` for each token. Each expert is sized for capacity_factor x
  // its even share of the tokens (1: balanced and dropless; GShard's 1.25 pads). 0 experts:
  // a dense model.
  int experts = 0;
  int experts_per_token = 2;
  int moe_every = 1;
  int expert_ffn_hidden = 0;
  double capacity_factor = 1.0;
  // DeepSeek's and Llama 4's shared experts: a dense MLP (same `mlp` kind) of this inner
  // width (DeepSeek: n_shared_experts x moe_intermediate_size) that every token runs
  // through beside its routed experts, in each layer with experts. 0: none.
  int shared_expert_ffn_hidden = 0;
  // DeepSeek's first_k_dense_replace: the first this many layers are dense (a dense MLP of
  // ffn_hidden) whatever moe_every says.
  int first_dense_layers = 0;
  // Group-limited routing (DeepSeek-V3's node-limited routing, arXiv:2412.19437 §2.1.2; HF
  // n_group / topk_group, Megatron --moe-router-num-groups / --moe-router-group-topk): the
  // experts fall into router_groups groups of consecutive experts and each token picks its
  // experts_per_token among the experts of its router_group_topk best groups. Changes no
  // GEMM; it bounds the nodes a token's copies reach (expert_routing.hpp). 0: no groups.
  int router_groups = 0;
  int router_group_topk = 0;
  // Routing imbalance, as a stated distribution of the experts' loads: expert i (0-based)
  // receives a share proportional to (i + 1)^(-expert_load_skew) of the routed tokens
  // (Zipf; 0 = balanced, every expert 1 / experts). Each expert computes its padded
  // capacity (capacity_factor x its even share) or, when its load exceeds that, its load
  // (dropless); the experts sit on the expert ranks in contiguous blocks (Megatron-core's
  // layout), so the rank holding the most loaded ones paces the layer.
  double expert_load_skew = 0;
  // The rows the busiest of `expert_degree` expert ranks computes over the balanced
  // padded rows (capacity_factor x experts_per_token x its tokens): 1 when balanced,
  // (ep / (E cf)) max over ranks of the sum over its experts of max(cf, E share_i).
  double busiest_expert_rank_load(int expert_degree) const;
  bool is_moe() const { return experts > 0; }
  // Whether model layer `layer` (0-based) has experts: from layer first_dense_layers on,
  // every moe_every-th (layers 0, k, 2k, ... counted from 0). The one rule (moe_layer_at).
  bool is_moe_layer(int layer) const { return moe_layer_at(layer, experts, moe_every, first_dense_layers); }
  static bool moe_layer_at(int layer, int experts, int moe_every, int first_dense_layers) {
    return experts > 0 && layer >= first_dense_layers && layer % moe_every == 0;
  }
  // Of model layers [first, first + count), how many have experts.
  int moe_layers_in(int first, int count) const;

  // The `head_dim` key: a head's width where it is set apart from hidden / heads (Qwen3,
  // Gemma, gpt-oss, Mistral-Nemo); 0 = hidden / heads. The queries then span
  // heads x head_dim (query_width), which QKV projects to and the output projection reads.
  int attention_head_dim = 0;
  // Multi-head latent attention (attention: mla; DeepSeek-V2/V3, Megatron-core's
  // MLASelfAttention): the queries through a latent of q_lora_rank (0: one projection
  // from hidden, DeepSeek-V2-Lite), the keys and values through a latent of
  // kv_lora_rank plus a rotary key of qk_rope_head_dim shared by the heads; each head's
  // query and key have qk_nope_head_dim + qk_rope_head_dim dimensions, its value
  // v_head_dim. head_dim() is the query/key width.
  int q_lora_rank = 0, kv_lora_rank = 0, qk_rope_head_dim = 0, qk_nope_head_dim = 0, v_head_dim = 0;
  bool is_mla() const { return attention == AttentionKind::mla; }
  int head_dim() const {
    if (is_mla()) return qk_nope_head_dim + qk_rope_head_dim;
    return attention_head_dim > 0 ? attention_head_dim : hidden / heads;
  }
  int query_width() const { return heads * head_dim(); }
  // Sliding-window attention (Mistral, gpt-oss, Gemma): a query attends to the last
  // `sliding_window` positions (itself included) in the windowed layers; with
  // full_attention_every k > 0 layers k-1, 2k-1, ... attend to the whole sequence (gpt-oss:
  // k = 2, alternating; Gemma 3: k = 6), with 0 every layer is windowed. 0: no window.
  int sliding_window = 0;
  int full_attention_every = 0;
  bool is_full_attention_layer(int layer) const {
    return full_attention_at(layer, sliding_window, full_attention_every);
  }
  // The one rule, for callers that hold the two keys without a ModelSpec (the backend).
  static bool full_attention_at(int layer, int sliding_window, int full_attention_every) {
    return sliding_window == 0 || (full_attention_every > 0 && (layer + 1) % full_attention_every == 0);
  }
  // The attention core's share of the s x s score pairs it computes, averaged over the
  // layers (1 without a window): the plan prices every layer at the mean
  // (attention_plan.cpp). Counted as the causal core is (both halves), so a window of w < s
  // keeps (w (w + 1) + 2 (s - w) w) / s^2.
  double attention_span_fraction() const;
  // gpt-oss's attention sinks: a learned logit per head added to the softmax's
  // denominator (heads parameters a layer).
  bool attention_sinks = false;
  // Qwen3's QK-norm: an RMSNorm over head_dim applied to every query and key head after
  // QKV (before rotary positions), its two scales (head_dim each) shared by the heads.
  bool qk_norm = false;
  // Multi-token prediction (DeepSeek-V3 §2.2; Megatron-Core's --mtp-num-layers, Hugging
  // Face's num_nextn_predict_layers): `mtp_layers` sequential depths after the last layer,
  // each predicting one token further. A depth runs the shifted tokens through the shared
  // embedding, RMSNorms of that embedding and of the hidden state, a projection of the two
  // side by side (2h -> h), one transformer layer of the last layer's kind, its own final
  // norm, the shared output head and its own cross-entropy. It sits with the loss on the
  // head's stage (layer_plan.hpp: in the head plan). 0: none.
  int mtp_layers = 0;
  bool has_mtp() const { return mtp_layers > 0; }
  // Whether the MTP layer has experts: it is built from the last layer's specification
  // (Megatron-Core's get_gpt_mtp_block_spec), so it has them when the last layer does.
  bool mtp_layer_has_experts() const { return is_moe_layer(layers - 1); }
  // Parameter counts: parameter_count.hpp (read from the layer plans).
};

}  // namespace partune
