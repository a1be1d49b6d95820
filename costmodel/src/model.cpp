#include "partune/costmodel/model.hpp"

#include "partune/costmodel/enum_names.hpp"

namespace partune {

const char* to_string(AttentionKind k) { return enum_name(k); }  // enum_names.cpp

double ModelSpec::norm_params() const { return (norm == NormKind::layernorm ? 2.0 : 1.0) * hidden; }

double ModelSpec::layer_params() const {
  const double h = hidden, f = ffn_hidden, b = bias ? 1.0 : 0.0;
  const double kv = static_cast<double>(kv_heads) * head_dim();
  const double attention = h * (h + 2 * kv) + b * (h + 2 * kv)  // QKV weight + bias
                           + h * h + b * h;                     // output projection
  const double matrices = mlp == MlpKind::swiglu ? 3.0 : 2.0;   // (gate,) up, down
  const double ffn = matrices * h * f + b * ((matrices - 1.0) * f + h);
  return attention + ffn + 2.0 * norm_params();
}

double ModelSpec::embedding_params() const {
  const double table = static_cast<double>(vocab) * hidden;
  return positions == PositionKind::learned ? table + static_cast<double>(seq_len) * hidden : table;
}

double ModelSpec::head_params() const {
  // Final norm always; the projection only when not tied to the embedding.
  return norm_params() + (tied_embeddings ? 0.0 : static_cast<double>(vocab) * hidden);
}

double ModelSpec::total_params() const {
  return layers * layer_params() + embedding_params() + head_params();
}

}  // namespace partune
