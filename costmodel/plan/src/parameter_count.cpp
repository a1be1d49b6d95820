// Parameter counts from the layer plans and bytes per parameter (parameter_count.hpp).
#include "partune/costmodel/parameter_count.hpp"

namespace partune {

namespace {

// The plans of the whole model: tensor and expert degree 1 (PlanConfig's defaults).
const PlanConfig kWholeModel{};

}  // namespace

double layer_parameters(const ModelSpec& m, bool moe) { return layer_plan(m, kWholeModel, moe).params(); }

double embedding_parameters(const ModelSpec& m) { return embedding_plan(m, kWholeModel).params(); }

double head_parameters(const ModelSpec& m) { return head_plan(m, kWholeModel).params(); }

double total_parameters(const ModelSpec& m) {
  const LayerMix mix = layer_mix(m, 0, m.layers);
  double layers = mix.dense * layer_parameters(m, false);
  if (mix.moe > 0) layers += mix.moe * layer_parameters(m, true);
  return layers + embedding_parameters(m) + head_parameters(m);
}

double active_parameters(const ModelSpec& m) {
  const LayerMix mix = layer_mix(m, 0, m.layers);
  double layers = mix.dense * layer_parameters(m, false);
  if (mix.moe > 0) {
    // At expert degree 1 the plan's expert GEMMs hold every expert; a token runs through
    // experts_per_token of them.
    const LayerPlan moe = moe_layer_plan(m, kWholeModel);
    const double experts = moe.expert_params(), one_expert = experts / m.experts;
    layers += mix.moe * (moe.params() - experts + m.experts_per_token * one_expert);
  }
  // The MTP layers' experts (in the head plan) likewise.
  const LayerPlan head = head_plan(m, kWholeModel);
  const double head_experts = head.expert_params();
  const double head_active = head_experts > 0 ? head_experts / m.experts * m.experts_per_token : 0.0;
  return layers + embedding_parameters(m) + head.params() - head_experts + head_active;
}

double active_compute_parameters(const ModelSpec& m) {
  // The embedding plan's tables are looked up, not multiplied; tied, the token table is
  // the LM head's projection (the logits GEMM's k x n), which is.
  const PlanOp& logits = head_plan(m, kWholeModel).op(PlanOpRole::logits);
  return active_parameters(m) - embedding_parameters(m) + (m.tied_embeddings ? logits.k * logits.n : 0.0);
}

RankParameters rank_parameters(const LayerPlan& dense, const LayerPlan& moe, const LayerPlan& embedding,
                               const LayerPlan& head) {
  RankParameters r;
  r.dense_layer = dense.params();
  r.moe_layer = moe.params();
  r.moe_layer_experts = moe.expert_params();
  r.embedding = embedding.params();
  r.head = head.params();
  r.head_experts = head.expert_params();
  const PlanOp& logits = head.op(PlanOpRole::logits);
  r.head_projection = logits.k * logits.n;
  r.dense_layer_tensors = dense.parameter_tensors();
  r.moe_layer_tensors = moe.parameter_tensors();
  r.embedding_tensors = embedding.parameter_tensors();
  r.head_tensors = head.parameter_tensors();
  return r;
}

RankParameters rank_parameters(const Job& job) {
  const PlanConfig c = plan_config(job);
  const LayerPlan dense = transformer_layer_plan(job.model, c);
  const LayerPlan moe = job.model.is_moe() ? moe_layer_plan(job.model, c) : dense;
  return rank_parameters(dense, moe, embedding_plan(job.model, c), head_plan(job.model, c));
}

double stage_parameter_count(const Job& job, const RankParameters& rank, int stage) {
  const LayerMix mix = job.stage_mix(stage);
  double p = mix.dense * rank.dense_layer + mix.moe * rank.moe_layer;
  if (stage == 0) p += rank.embedding;
  if (stage == job.lm_head_stage()) {
    p += rank.head;
    // A tied embedding is kept on both pipeline ends when the head sits on the last
    // stage (Megatron); on the first stage (head first, or a V) the head uses the
    // embedding itself.
    if (job.tied_embedding_copies()) p += rank.head_projection;
  }
  return p;
}

double stage_optimizer_parameters(const Job& job, const RankParameters& rank, int stage) {
  const double all = stage_parameter_count(job, rank, stage), experts = stage_expert_parameter_count(job, rank, stage);
  return (all - experts) * job.optimizer_shard_fraction() + experts * job.expert_optimizer_shard_fraction();
}

int stage_parameter_tensors(const Job& job, const RankParameters& rank, int stage) {
  const LayerMix mix = job.stage_mix(stage);
  int n = mix.dense * rank.dense_layer_tensors + mix.moe * rank.moe_layer_tensors;
  if (stage == 0) n += rank.embedding_tensors;
  if (stage == job.lm_head_stage()) n += rank.head_tensors + (job.tied_embedding_copies() ? 1 : 0);
  return n;
}

double stage_parameter_count(const Job& job, int stage) {
  return stage_parameter_count(job, rank_parameters(job), stage);
}

double stage_expert_parameter_count(const Job& job, const RankParameters& rank, int stage) {
  return job.stage_mix(stage).moe * rank.moe_layer_experts + (stage == job.lm_head_stage() ? rank.head_experts : 0.0);
}

double stage_expert_parameter_count(const Job& job, int stage) {
  if (!job.model.is_moe()) return 0.0;  // (the MTP layer has experts only in such a model)
  return stage_expert_parameter_count(job, rank_parameters(job), stage);
}

ParameterBytes parameter_bytes(const Job& job) {
  ParameterBytes b = parameter_bytes(job.training.precision, job.training.optimizer, job.training.moment_bytes());
  b.gradients = job.gradient_bytes_per_element();
  return b;
}

ParameterBytes parameter_bytes(Precision precision, Optimizer optimizer, double moment_bytes) {
  const double moments = (optimizer == Optimizer::adam ? 2.0 : 1.0) * moment_bytes;
  if (mixed_precision(precision)) return {2.0, 2.0, 4.0 + moments};
  return {4.0, 4.0, moments};
}

}  // namespace partune
