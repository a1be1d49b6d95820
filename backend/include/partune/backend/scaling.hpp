#pragma once
// The model-size scaling rule: the backend runs the job's program on a model small
// enough for this machine. The job file is not changed; `partune run --scale-*` flags
// give explicit sizes. No LibTorch here.
#include <string>

#include "partune/costmodel/job.hpp"

namespace partune::backend {

// Explicit sizes; 0 = decided by the rule below.
struct ScaleOptions {
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int seq_len = 0;
  int vocab = 0;
  // The job's model as it is, whatever its size (`run --scale-whole`, or a GPU run:
  // --device cuda), the sizes given above still winning.
  bool whole = false;
};

// The sizes the backend runs, and the block it builds: the GPT block (gelu, layernorm,
// learned positions, biases, multi-head attention) by default, or the job's variants
// (LLaMA-style: swiglu, rmsnorm, rope, no biases, grouped-query attention).
struct BackendModelConfig {
  int layers = 2;
  int hidden = 64;
  int heads = 4;
  int kv_heads = 0;      // key/value heads; 0 = heads (multi-head attention)
  int ffn_hidden = 256;  // 4 * hidden unless the job's model is kept as it is
  int vocab = 256;
  int seq_len = 32;
  bool tied_embeddings = true;
  bool flash_attention = false;  // the job's parallel.flash_attention: the attention kernel
  AttentionKind attention = AttentionKind::mha;
  MlpKind mlp = MlpKind::gelu;
  NormKind norm = NormKind::layernorm;
  PositionKind positions = PositionKind::learned;
  bool bias = true;  // the linear layers' biases (a LayerNorm keeps its shift either way)
  // A mixture of experts (ModelSpec's keys): 0 experts = dense.
  int experts = 0, experts_per_token = 2, moe_every = 1, expert_ffn_hidden = 0;
  double capacity_factor = 1.0;
  int shared_expert_ffn_hidden = 0, first_dense_layers = 0;  // ModelSpec's
  bool is_moe_layer(int layer) const {
    return ModelSpec::moe_layer_at(layer, experts, moe_every, first_dense_layers);
  }
  int attention_head_dim = 0;  // ModelSpec's: a head's width set apart; 0 = hidden / heads
  int head_dim() const {
    if (attention == AttentionKind::mla) return qk_nope_head_dim + qk_rope_head_dim;
    return attention_head_dim > 0 ? attention_head_dim : hidden / heads;
  }
  int query_width() const { return heads * head_dim(); }
  bool qk_norm = false;  // ModelSpec's: RMSNorm of every query and key head (Qwen3)
  // ModelSpec's sliding window (0: none), the period of its full-attention layers, and
  // gpt-oss's attention sinks (a learned logit per head in each softmax's denominator).
  int sliding_window = 0, full_attention_every = 0;
  bool attention_sinks = false;
  // The window a layer's queries look back over (0: the whole sequence): ModelSpec's rule.
  int window_of_layer(int layer) const {
    return ModelSpec::full_attention_at(layer, sliding_window, full_attention_every) ? 0 : sliding_window;
  }
  // Multi-head latent attention (attention mla): ModelSpec's latent keys.
  int q_lora_rank = 0, kv_lora_rank = 0, qk_rope_head_dim = 0, qk_nope_head_dim = 0, v_head_dim = 0;
  int key_value_heads() const { return kv_heads > 0 ? kv_heads : heads; }
  // The parameters of the whole model the backend builds: the cost model's count
  // (parameter_count.hpp, from the layer plans), which test_parameter_shards checks
  // against the tensors of the shards the backend builds.
  long long parameters() const;
};

// A model is small enough to run as it is when it has at most this many parameters and a
// sequence of at most kSmallSeqLen tokens.
constexpr double kSmallModelParams = 10e6;
constexpr int kSmallSeqLen = 1024;

// The rule: every size given in `scale` wins. The others keep the job's values when the
// model is small (above), else take the defaults: 2 layers, hidden 64, 4 heads, sequence
// 32, vocabulary 256. ffn_hidden is the job's when hidden is the job's, else 4 * hidden
// (for SwiGLU too: its fc1 then holds 8 * hidden columns); heads default to the job's
// when they divide the hidden size and the model is kept, else 4 (or the largest divisor
// of hidden <= 4). The block keeps the job's variants (mlp, norm, positions, bias,
// attention). Key/value heads: all the heads for mha, 1 for mqa; for gqa the job's when
// its heads are kept, else the job's share of the heads (kv_heads / heads) of the new
// heads, at least `min_kv_heads` (the Job overload: the tensor-parallel degree, which
// splits them), rounded up to a divisor of the heads. Tied embeddings follow the job.
// Throws std::invalid_argument for sizes that cannot work (heads not dividing hidden,
// values < 1, an odd head dim with rotary positions).
BackendModelConfig scaled_model(const ModelSpec& model, const ScaleOptions& scale, int min_kv_heads = 1);
// The job's model by the rule (min_kv_heads: its tensor-parallel degree), with the job's
// choice of attention kernel.
BackendModelConfig scaled_model(const Job& job, const ScaleOptions& scale);

// The job with its model replaced by `config` (same name suffixed "-scaled" when any size
// changed), so that build_program and the batch arithmetic see the sizes that run. The
// block's variants are the config's, so the cost model predicts the block that runs.
// Its sharding keeps no tensor whole (param_persistence_threshold 0): the backend gathers
// every sharded layer, as the program it runs then says.
Job scaled_job(const Job& job, const BackendModelConfig& config);

// "2 layers, hidden 64, 4 heads (head dim 16), ffn 256, vocab 256, seq 32, tied embeddings,
// 0.119M parameters"; a block other than GPT's names what differs after the sizes:
// "..., seq 32, swiglu, rmsnorm, rope, gqa 2 kv heads, no bias, tied embeddings, ..."
std::string describe(const BackendModelConfig& config);

// What runs against the job's model, and why, in one line (the first `partune run`
// prints): "runs a scaled-down gpt2-small: 2 layers, hidden 64, seq 32, 0.119M parameters
// (124M as written), because ..."; "runs gpt2-small as written: ..." when no size changed;
// "runs gpt2-small resized by --scale-*: ..." when `scale` gave sizes.
std::string describe_scaling(const ModelSpec& model, const BackendModelConfig& ran, const ScaleOptions& scale);

}  // namespace partune::backend
