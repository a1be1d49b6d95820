#include "partune/costmodel/flops.hpp"

#include "partune/costmodel/layer_plan.hpp"

namespace partune {

namespace {
PlanConfig whole_model(double sequences) {
  PlanConfig c;
  c.sequences = sequences;
  return c;  // tensor degree 1: every op whole
}
}  // namespace

LayerFlops layer_forward_flops(const ModelSpec& m, double sequences) {
  const LayerPlan plan = transformer_layer_plan(m, whole_model(sequences));
  LayerFlops lf;
  lf.qkv = plan.find("qkv")->flops;
  lf.projection = plan.find("projection")->flops;
  lf.fc1 = plan.find("fc1")->flops;
  lf.fc2 = plan.find("fc2")->flops;
  lf.scores = lf.context = plan.attention_flops() / 2;  // Q K^T and scores x V alike
  return lf;
}

double logits_forward_flops(const ModelSpec& m, double sequences) {
  return head_plan(m, whole_model(sequences)).gemm_flops();
}

double model_flops_per_step(const ModelSpec& m, double global_batch) {
  // Backward costs twice the forward (gradients w.r.t. inputs and weights).
  return 3.0 * (m.layers * layer_forward_flops(m, global_batch).total() +
                logits_forward_flops(m, global_batch));
}

double hardware_flops_per_step(const ModelSpec& m, double global_batch, Checkpointing ckpt,
                               double checkpointed_fraction) {
  const double recompute = m.layers * recomputed_forward_flops(m, global_batch, ckpt);
  return model_flops_per_step(m, global_batch) + checkpointed_fraction * recompute;
}

double recomputed_forward_flops(const ModelSpec& m, double sequences, Checkpointing ckpt) {
  return transformer_layer_plan(m, whole_model(sequences)).recomputed_flops(ckpt);
}

double megatron_model_flops(double B, double s, double l, double h, double V) {
  return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}

double megatron_hardware_flops(double B, double s, double l, double h, double V) {
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

}  // namespace partune
