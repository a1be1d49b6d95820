#include "partune/costmodel/activation_memory.hpp"

#include "partune/costmodel/layer_plan.hpp"

#include <algorithm>

namespace partune {

double largest_extra_unit(const Job& job, const RankParameters& rank, int stage) {
  double largest = 0;
  if (stage == 0) largest = rank.embedding;
  if (stage == job.lm_head_stage()) largest = std::max(largest, rank.head);
  return largest;
}

double layer_activation_bytes(const ModelSpec& m, double sequences, int tensor_degree,
                              bool flash_attention) {
  PlanConfig c;
  c.sequences = sequences;
  c.tensor_degree = tensor_degree;
  c.flash_attention = flash_attention;
  return transformer_layer_plan(m, c).stored_bytes(Checkpointing::none);  // 16-bit accounting
}

namespace {
// `figure` of each kind of layer at `sequences` (a model without experts: the dense one's
// for both).
template <class Figure>
LayerKindBytes by_kind(const Job& job, double sequences, Figure figure) {
  PlanConfig c = plan_config(job);
  c.sequences = sequences;
  LayerKindBytes out;
  out.dense = figure(transformer_layer_plan(job.model, c));
  out.moe = job.model.is_moe() ? figure(moe_layer_plan(job.model, c)) : out.dense;
  return out;
}

// The mean over the model's layers.
double model_mean(const Job& job, const LayerKindBytes& kinds) {
  if (!job.model.is_moe()) return kinds.dense;  // exactly, not n x dense / n
  const LayerMix mix = layer_mix(job.model, 0, job.model.layers);
  return mix.total() > 0 ? kinds.of(mix) / mix.total() : kinds.dense;
}
}  // namespace

LayerKindBytes stored_layer_bytes_by_kind(const Job& job, double sequences) {
  const Checkpointing policy = job.parallel.activation_checkpointing;
  return by_kind(job, sequences, [&](const LayerPlan& p) { return p.stored_bytes(policy); });
}

LayerKindBytes full_layer_bytes_by_kind(const Job& job, double sequences) {
  return by_kind(job, sequences, [](const LayerPlan& p) { return p.stored_bytes(Checkpointing::none); });
}

LayerKindBytes weight_gradient_bytes_by_kind(const Job& job, double sequences) {
  const double element = bytes_per_element(job.training.precision);
  return by_kind(job, sequences, [&](const LayerPlan& p) { return p.weight_gradient_bytes(element); });
}

double stored_layer_bytes(const Job& job, double sequences) {
  return model_mean(job, stored_layer_bytes_by_kind(job, sequences));
}

namespace {
// by_kind over plans already built.
template <class Figure>
LayerKindBytes of_plans(const Job& job, const LayerPlan& dense, const LayerPlan& moe, Figure figure) {
  LayerKindBytes out;
  out.dense = figure(dense);
  out.moe = job.model.is_moe() ? figure(moe) : out.dense;
  return out;
}
}  // namespace

LayerKindBytes stored_layer_bytes_by_kind(const Job& job, const LayerPlan& dense, const LayerPlan& moe) {
  const Checkpointing policy = job.parallel.activation_checkpointing;
  return of_plans(job, dense, moe, [&](const LayerPlan& p) { return p.stored_bytes(policy); });
}

LayerKindBytes full_layer_bytes_by_kind(const Job& job, const LayerPlan& dense, const LayerPlan& moe) {
  return of_plans(job, dense, moe, [](const LayerPlan& p) { return p.stored_bytes(Checkpointing::none); });
}

LayerKindBytes weight_gradient_bytes_by_kind(const Job& job, const LayerPlan& dense, const LayerPlan& moe) {
  const double element = bytes_per_element(job.training.precision);
  return of_plans(job, dense, moe, [&](const LayerPlan& p) { return p.weight_gradient_bytes(element); });
}

double stored_layer_bytes(const Job& job, const LayerPlan& dense, const LayerPlan& moe) {
  return model_mean(job, stored_layer_bytes_by_kind(job, dense, moe));
}

double full_layer_bytes(const Job& job, double sequences) {
  return model_mean(job, full_layer_bytes_by_kind(job, sequences));
}

double recomputed_layer_bytes(const Job& job, double sequences) {  // the larger kind's
  const Checkpointing policy = job.parallel.activation_checkpointing;
  const LayerKindBytes k = by_kind(job, sequences, [&](const LayerPlan& p) { return p.recomputed_bytes(policy); });
  return std::max(k.dense, k.moe);
}

double stored_stage_bytes(const Job& job, double sequences, int stage) {
  PlanConfig c = plan_config(job);
  c.sequences = sequences;
  const Checkpointing policy = job.parallel.activation_checkpointing;
  const LayerMix L = job.stage_mix(stage), K = job.checkpointed_mix(stage);
  const LayerPlan dense = transformer_layer_plan(job.model, c);
  double bytes = K.dense * dense.stored_bytes(policy) + (L.dense - K.dense) * dense.stored_bytes(Checkpointing::none);
  if (L.moe > 0) {
    const LayerPlan moe = moe_layer_plan(job.model, c);
    bytes += K.moe * moe.stored_bytes(policy) + (L.moe - K.moe) * moe.stored_bytes(Checkpointing::none);
  }
  return bytes;
}

double logits_bytes(const LayerPlan& head) { return head.stored_bytes(Checkpointing::none); }

double logits_bytes_per_microbatch(const Job& job) { return logits_bytes(head_plan(job.model, plan_config(job))); }

}  // namespace partune
