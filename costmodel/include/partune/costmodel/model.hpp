#pragma once
// A GPT-style decoder: embeddings, `layers` identical transformer layers, final norm
// and an LM head (tied to the input embedding or not).
#include <cstdint>
#include <string>

namespace partune {

enum class AttentionKind { mha, gqa, mqa };
const char* to_string(AttentionKind k);

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
  // Dropout probability of the attention scores and the residual branches. With 0 the
  // layer keeps no dropout masks and no dropped-out scores (Korthikanti's 5as²b becomes
  // the softmax output's 2as²b, and the two residual masks go).
  double dropout = 0.1;
  bool has_dropout() const { return dropout > 0.0; }

  int head_dim() const { return hidden / heads; }
  // Parameters of one transformer layer (QKV, projection, two FFN matrices, biases,
  // two layer norms).
  double layer_params() const;
  // Token embedding (vocab x hidden) plus learned positions (seq_len x hidden).
  double embedding_params() const;
  // LM head parameters that are not shared with the embedding.
  double head_params() const;
  double total_params() const;
};

}  // namespace partune
