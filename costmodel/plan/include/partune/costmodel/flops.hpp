#pragma once
// FLOP counts (multiply-add = 2 FLOP) of a GPT-style decoder, per operation and per step.
// For standard multi-head attention with a 4h FFN the per-step totals reduce exactly to
// the Megatron-LM formulas (Korthikanti et al. 2022; Narayanan et al. SC'21, Eq. 3):
//   model    F    = 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
//   hardware F_hw = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))   (full recompute counted)
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/model.hpp"

namespace partune {

// Forward FLOPs of one transformer layer's parts for `tokens` = b*s tokens.
struct LayerFlops {
  double qkv = 0;        // input projection to queries, keys, values
  double scores = 0;     // Q K^T
  double context = 0;    // softmax(scores) V
  double projection = 0; // attention output projection
  double fc1 = 0;        // FFN up
  double fc2 = 0;        // FFN down
  double gemm() const { return qkv + projection + fc1 + fc2; }
  double attention() const { return scores + context; }
  double total() const { return gemm() + attention(); }
};

// A dense layer's (the model's every layer without experts).
LayerFlops layer_forward_flops(const ModelSpec& m, double sequences);
// Every layer's forward, dense and with experts (those count the tokens routed to
// experts_per_token experts: the capacity padding is not the model's work).
double layers_forward_flops(const ModelSpec& m, double sequences);
// LM head (logits) forward FLOPs for `sequences` sequences.
double logits_forward_flops(const ModelSpec& m, double sequences);

// Per optimizer step, whole model, global batch B: forward + backward (backward = 2x
// forward), no recompute.
double model_flops_per_step(const ModelSpec& m, double global_batch);
// As above plus the forward work repeated by activation recompute
// (recomputed_forward_flops per checkpointed layer): full checkpointing recomputes every
// layer's forward (the 96 formula), selective only the attention core.
// `checkpointed_fraction` is the share of the model's layers that are checkpointed
// (Job::checkpointed_fraction(); parallel.checkpointed_layers): only they recompute.
double hardware_flops_per_step(const ModelSpec& m, double global_batch, Checkpointing ckpt,
                               double checkpointed_fraction = 1.0);
// Both of a step's figures from one build of each plan (the estimator's headline).
struct StepFlops {
  double model = 0;     // model_flops_per_step
  double hardware = 0;  // hardware_flops_per_step
};
StepFlops step_flops(const ModelSpec& m, double global_batch, Checkpointing ckpt, double checkpointed_fraction = 1.0);
// The whole model's forward FLOPs and its recompute under every checkpointing policy at one
// global batch, from one build of each plan: step_flops for any policy and fraction (what a
// job's costs and a search over one model read; at() is step_flops, bit for bit).
inline constexpr int kCheckpointingPolicies = 5;  // Checkpointing's values
struct ModelStepFlops {
  double layers_forward = 0;  // every layer, by kind
  double head_forward = 0;    // the head (and its multi-token-prediction layers)
  double layers_recompute[kCheckpointingPolicies] = {};  // by Checkpointing
  StepFlops at(Checkpointing ckpt, double checkpointed_fraction = 1.0) const;
};
ModelStepFlops model_step_flops(const ModelSpec& m, double global_batch);

// Forward FLOPs of one dense layer's ops that `ckpt` recomputes in backward for `sequences`
// sequences (the layer plan's `recomputed` rule: none, the attention core, the whole
// forward).
double recomputed_forward_flops(const ModelSpec& m, double sequences, Checkpointing ckpt);

// The closed forms, kept separate so tests compare the op-by-op sum against them.
double megatron_model_flops(double B, double s, double l, double h, double V);
double megatron_hardware_flops(double B, double s, double l, double h, double V);

}  // namespace partune
