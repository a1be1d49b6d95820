#pragma once
// A GPT-style decoder: embeddings, `layers` identical transformer layers, final norm
// and an LM head (tied to the input embedding or not).
#include <cstdint>
#include <string>

namespace partune {

enum class AttentionKind { mha, gqa, mqa };
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

  int head_dim() const { return hidden / heads; }
  // Parameters of one transformer layer: Q, K, V and the projection, the MLP's two or
  // three matrices, their biases when `bias`, two norms.
  double layer_params() const;
  // Parameters of one norm over `hidden`: 2 hidden (layernorm), hidden (rmsnorm).
  double norm_params() const;
  // Token embedding (vocab x hidden) plus learned positions (seq_len x hidden; none with rope).
  double embedding_params() const;
  // LM head parameters that are not shared with the embedding.
  double head_params() const;
  double total_params() const;
};

}  // namespace partune
