#include "partune/costmodel/model.hpp"

#include "partune/costmodel/enum_names.hpp"

namespace partune {

const char* to_string(AttentionKind k) { return enum_name(k); }  // enum_names.cpp

double ModelSpec::norm_params() const { return (norm == NormKind::layernorm ? 2.0 : 1.0) * hidden; }

namespace {
// An MLP of `f` hidden units: two or three matrices (GeLU; SwiGLU's gate, up, down) and
// their biases.
double mlp_params(const ModelSpec& m, double f) {
  const double h = m.hidden, b = m.bias ? 1.0 : 0.0;
  const double matrices = m.mlp == MlpKind::swiglu ? 3.0 : 2.0;
  return matrices * h * f + b * ((matrices - 1.0) * f + h);
}
// Attention (QKV and the projection with their biases) and the two norms.
double attention_and_norms(const ModelSpec& m) {
  const double h = m.hidden, b = m.bias ? 1.0 : 0.0;
  const double kv = static_cast<double>(m.kv_heads) * m.head_dim();
  return h * (h + 2 * kv) + b * (h + 2 * kv)  // QKV weight + bias
         + h * h + b * h                      // output projection
         + 2.0 * m.norm_params();
}
}  // namespace

int ModelSpec::moe_layers_in(int first, int count) const {
  if (!is_moe() || count <= 0) return 0;
  // Multiples of moe_every in [first, first + count).
  const int end = first + count;
  return (end + moe_every - 1) / moe_every - (first + moe_every - 1) / moe_every;
}

double ModelSpec::layer_params() const { return attention_and_norms(*this) + mlp_params(*this, ffn_hidden); }

double ModelSpec::expert_params() const { return mlp_params(*this, expert_ffn_hidden); }

double ModelSpec::moe_layer_params() const {
  return attention_and_norms(*this) + static_cast<double>(hidden) * experts + experts * expert_params();
}

double ModelSpec::active_moe_layer_params() const {
  return attention_and_norms(*this) + static_cast<double>(hidden) * experts + experts_per_token * expert_params();
}

double ModelSpec::layers_params() const {
  const int moe = moe_layers_in(0, layers);
  return (layers - moe) * layer_params() + moe * moe_layer_params();
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
  return layers_params() + embedding_params() + head_params();
}

double ModelSpec::active_params() const {
  const int moe = moe_layers_in(0, layers);
  return (layers - moe) * layer_params() + moe * active_moe_layer_params() + embedding_params() + head_params();
}

}  // namespace partune
