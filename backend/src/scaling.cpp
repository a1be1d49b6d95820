// The model-size scaling rule (scaling.hpp).
#include "partune/backend/scaling.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace partune::backend {

long long BackendModelConfig::parameters() const {
  const long long h = hidden, f = ffn_hidden;
  const long long layer = (h * 3 * h + 3 * h)  // QKV (column-parallel)
                          + (h * h + h)        // attention output (row-parallel)
                          + (h * f + f)        // fc1 (column-parallel)
                          + (f * h + h)        // fc2 (row-parallel)
                          + 4 * h;             // two layer norms
  const long long embeddings = static_cast<long long>(vocab) * h + static_cast<long long>(seq_len) * h;
  const long long head = tied_embeddings ? 0 : static_cast<long long>(vocab) * h;
  return layers * layer + embeddings + 2 * h /* final LN */ + head;
}

BackendModelConfig scaled_model(const ModelSpec& model, const ScaleOptions& scale) {
  const bool small = model.total_params() <= kSmallModelParams && model.seq_len <= kSmallSeqLen &&
                     model.layers >= 1 && model.hidden >= 1 && model.heads >= 1;
  BackendModelConfig c;
  c.tied_embeddings = model.tied_embeddings;
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
  c.ffn_hidden = (c.hidden == model.hidden && model.ffn_hidden > 0) ? model.ffn_hidden : 4 * c.hidden;
  if (c.layers < 1 || c.hidden < 1 || c.heads < 1 || c.seq_len < 1 || c.vocab < 2)
    throw std::invalid_argument(fmt::format("scaled model: every size must be >= 1 (vocab >= 2): {}", describe(c)));
  if (c.hidden % c.heads != 0)
    throw std::invalid_argument(
        fmt::format("scaled model: {} heads do not divide hidden {} (use --scale-heads)", c.heads, c.hidden));
  return c;
}

Job scaled_job(const Job& job, const BackendModelConfig& c) {
  Job j = job;
  ModelSpec& m = j.model;
  const bool same = m.layers == c.layers && m.hidden == c.hidden && m.heads == c.heads &&
                    m.ffn_hidden == c.ffn_hidden && m.vocab == c.vocab && m.seq_len == c.seq_len &&
                    m.attention == AttentionKind::mha && m.mlp == MlpKind::gelu && m.norm == NormKind::layernorm &&
                    m.positions == PositionKind::learned && m.bias;
  if (!same) m.name += "-scaled";
  m.layers = c.layers;
  m.hidden = c.hidden;
  m.heads = c.heads;
  m.kv_heads = c.heads;
  m.ffn_hidden = c.ffn_hidden;
  m.vocab = c.vocab;
  m.seq_len = c.seq_len;
  m.tied_embeddings = c.tied_embeddings;
  m.attention = AttentionKind::mha;
  // The backend builds the GPT block (gelu, layernorm, learned positions, biases).
  m.mlp = MlpKind::gelu;
  m.norm = NormKind::layernorm;
  m.positions = PositionKind::learned;
  m.bias = true;
  return j;
}

BackendModelConfig scaled_model(const Job& job, const ScaleOptions& scale) {
  BackendModelConfig c = scaled_model(job.model, scale);
  c.flash_attention = job.parallel.flash_attention;
  return c;
}

std::string describe(const BackendModelConfig& c) {
  return fmt::format("{} layers, hidden {}, {} heads (head dim {}), ffn {}, vocab {}, seq {}, {}, {:.3f}M parameters{}",
                     c.layers, c.hidden, c.heads, c.heads > 0 ? c.hidden / c.heads : 0, c.ffn_hidden, c.vocab,
                     c.seq_len, c.tied_embeddings ? "tied embeddings" : "untied LM head", c.parameters() / 1e6,
                     c.flash_attention ? ", flash attention" : "");
}

}  // namespace partune::backend
