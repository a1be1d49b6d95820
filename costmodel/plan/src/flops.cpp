#include "partune/costmodel/flops.hpp"

#include "partune/costmodel/layer_plan.hpp"

namespace partune {

namespace {
PlanConfig whole_model(double sequences) {
  PlanConfig c;
  c.sequences = sequences;
  return c;  // tensor degree 1: every op whole
}

// The model's layers by kind: a layer with experts counts the tokens it routes
// (experts_per_token per token), not the capacity padding.
struct PerKind {
  LayerMix mix;
  ModelSpec routed;
};
PerKind per_kind(const ModelSpec& m) {
  PerKind k{layer_mix(m, 0, m.layers), m};
  k.routed.capacity_factor = 1.0;
  k.routed.expert_load_skew = 0.0;  // the routed tokens, however they are spread
  return k;
}
}  // namespace

double layers_forward_flops(const ModelSpec& m, double sequences) {
  const PerKind k = per_kind(m);
  double f = k.mix.dense * transformer_layer_plan(m, whole_model(sequences)).forward_flops();
  if (k.mix.moe > 0) f += k.mix.moe * moe_layer_plan(k.routed, whole_model(sequences)).forward_flops();
  return f;
}

LayerFlops layer_forward_flops(const ModelSpec& m, double sequences) {
  const LayerPlan plan = transformer_layer_plan(m, whole_model(sequences));
  LayerFlops lf;
  // QKV, or multi-head latent attention's down and up projections.
  for (PlanOpRole r : {PlanOpRole::qkv, PlanOpRole::q_down, PlanOpRole::kv_down, PlanOpRole::q_up, PlanOpRole::kv_up})
    if (const PlanOp* op = plan.find(r)) lf.qkv += op->flops;
  lf.projection = plan.op(PlanOpRole::projection).flops;
  lf.fc1 = plan.op(PlanOpRole::fc1).flops;
  lf.fc2 = plan.op(PlanOpRole::fc2).flops;
  lf.scores = lf.context = plan.attention_flops() / 2;  // Q K^T and scores x V alike
  return lf;
}

double logits_forward_flops(const ModelSpec& m, double sequences) {
  return head_plan(m, whole_model(sequences)).gemm_flops();
}

double model_flops_per_step(const ModelSpec& m, double global_batch) {
  return step_flops(m, global_batch, Checkpointing::none).model;
}

double hardware_flops_per_step(const ModelSpec& m, double global_batch, Checkpointing ckpt,
                               double checkpointed_fraction) {
  return step_flops(m, global_batch, ckpt, checkpointed_fraction).hardware;
}

ModelStepFlops model_step_flops(const ModelSpec& m, double global_batch) {
  const PerKind k = per_kind(m);
  const PlanConfig whole = whole_model(global_batch);
  const LayerPlan dense = transformer_layer_plan(m, whole);
  ModelStepFlops out;
  out.layers_forward = k.mix.dense * dense.forward_flops();
  for (int p = 0; p < kCheckpointingPolicies; ++p)
    out.layers_recompute[p] = k.mix.dense * dense.recomputed_flops(static_cast<Checkpointing>(p));
  if (k.mix.moe > 0) {
    const LayerPlan moe = moe_layer_plan(k.routed, whole);
    out.layers_forward += k.mix.moe * moe.forward_flops();
    for (int p = 0; p < kCheckpointingPolicies; ++p)
      out.layers_recompute[p] += k.mix.moe * moe.recomputed_flops(static_cast<Checkpointing>(p));
  }
  // The head plan holds the multi-token-prediction layers (their attention cores too).
  out.head_forward = head_plan(k.routed, whole).forward_flops();
  return out;
}

StepFlops ModelStepFlops::at(Checkpointing ckpt, double checkpointed_fraction) const {
  StepFlops out;
  // Backward costs twice the forward (gradients w.r.t. inputs and weights).
  out.model = 3.0 * (layers_forward + head_forward);
  out.hardware = out.model + checkpointed_fraction * layers_recompute[static_cast<int>(ckpt)];
  return out;
}

StepFlops step_flops(const ModelSpec& m, double global_batch, Checkpointing ckpt, double checkpointed_fraction) {
  return model_step_flops(m, global_batch).at(ckpt, checkpointed_fraction);
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
