#include "partune/costmodel/flops.hpp"

namespace partune {

LayerFlops layer_forward_flops(const ModelSpec& m, double sequences) {
  const double s = m.seq_len, h = m.hidden, f = m.ffn_hidden;
  const double tokens = sequences * s;
  const double kv = static_cast<double>(m.kv_heads) * m.head_dim();
  LayerFlops lf;
  lf.qkv = 2 * tokens * h * (h + 2 * kv);
  lf.scores = 2 * sequences * s * s * h;   // all heads: heads * head_dim = h
  lf.context = 2 * sequences * s * s * h;
  lf.projection = 2 * tokens * h * h;
  lf.fc1 = 2 * tokens * h * f;
  lf.fc2 = 2 * tokens * f * h;
  return lf;
}

double logits_forward_flops(const ModelSpec& m, double sequences) {
  return 2.0 * sequences * m.seq_len * m.hidden * static_cast<double>(m.vocab);
}

double model_flops_per_step(const ModelSpec& m, double global_batch) {
  // Backward costs twice the forward (gradients w.r.t. inputs and weights).
  return 3.0 * (m.layers * layer_forward_flops(m, global_batch).total() +
                logits_forward_flops(m, global_batch));
}

double hardware_flops_per_step(const ModelSpec& m, double global_batch, Checkpointing ckpt,
                               double checkpointed_fraction) {
  const LayerFlops lf = layer_forward_flops(m, global_batch);
  double recompute = 0;
  if (ckpt == Checkpointing::full) recompute = m.layers * lf.total();
  if (ckpt == Checkpointing::selective) recompute = m.layers * lf.attention();
  return model_flops_per_step(m, global_batch) + checkpointed_fraction * recompute;
}

double megatron_model_flops(double B, double s, double l, double h, double V) {
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

double megatron_hardware_flops(double B, double s, double l, double h, double V) {
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

}  // namespace partune
