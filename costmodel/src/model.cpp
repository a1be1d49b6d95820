#include "partune/costmodel/model.hpp"

#include "partune/costmodel/enum_names.hpp"

namespace partune {

const char* to_string(AttentionKind k) { return enum_name(k); }  // enum_names.cpp

double ModelSpec::layer_params() const {
  const double h = hidden, f = ffn_hidden;
  const double kv = static_cast<double>(kv_heads) * head_dim();
  const double attention = h * (h + 2 * kv) + (h + 2 * kv)  // QKV weight + bias
                           + h * h + h;                     // output projection
  const double ffn = 2 * h * f + f + h;
  const double norms = 2 * 2 * h;
  return attention + ffn + norms;
}

double ModelSpec::embedding_params() const {
  return static_cast<double>(vocab) * hidden + static_cast<double>(seq_len) * hidden;
}

double ModelSpec::head_params() const {
  // Final layer norm always; the projection only when not tied to the embedding.
  return 2.0 * hidden + (tied_embeddings ? 0.0 : static_cast<double>(vocab) * hidden);
}

double ModelSpec::total_params() const {
  return layers * layer_params() + embedding_params() + head_params();
}

}  // namespace partune
