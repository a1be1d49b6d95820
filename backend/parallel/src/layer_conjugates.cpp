// The model's region-edge conjugates read from the layer plans (conjugates.hpp).
#include <stdexcept>
#include <string>

#include "partune/backend/conjugates.hpp"

namespace partune::backend {

namespace {

// The conjugate of the plan's region edge `role` (a tensor_comm op every plan with a
// tensor group holds: LayerPlan::op throws when it is missing).
Conjugate edge(const LayerPlan& plan, PlanOpRole role) {
  const PlanOp& op = plan.op(role);
  if (op.kind != PlanOpKind::tensor_comm)
    throw std::logic_error(std::string("layer plan: ") + to_string(role) + " is not a tensor_comm op");
  return op.conjugate;
}

// Whether the plan runs the edge `role`'s collectives beside its GEMM.
bool beside_gemm(const LayerPlan& plan, PlanOpRole role) { return plan.op(role).comm_beside_gemm; }

// Whether a layer with experts' plan routes before any region entry (the tokens the rank
// holds, moe_plan.cpp's Megatron path).
bool routes_before_entry(const LayerPlan& moe) {
  for (const PlanOp& op : moe.ops) {
    if (op.role == PlanOpRole::router) return true;
    if (op.role == PlanOpRole::mlp_in) return false;
  }
  throw std::logic_error("layer plan: a layer with experts without a router");
}

}  // namespace

LayerConjugates layer_conjugates(const Job& job) {
  const PlanConfig config = plan_config(job);
  LayerConjugates c;
  if (job.model.is_moe()) c.experts_route_shard = routes_before_entry(moe_layer_plan(job.model, config));
  // Tensor degree 1: no tensor group, no region edges in the plans; f and g are the
  // identity there (the LayerConjugates defaults name them).
  if (config.tensor_degree == 1) return c;
  const LayerPlan layer = transformer_layer_plan(job.model, config);
  const LayerPlan embedding = embedding_plan(job.model, config);
  const LayerPlan head = head_plan(job.model, config);
  c.attention_in = edge(layer, PlanOpRole::attention_in);
  c.attention_out = edge(layer, PlanOpRole::attention_out);
  c.mlp_in = edge(layer, PlanOpRole::mlp_in);
  c.mlp_out = edge(layer, PlanOpRole::mlp_out);
  c.embedding_out = edge(embedding, PlanOpRole::embedding_out);
  c.head_in = edge(head, PlanOpRole::head_in);
  c.beside_gemm.attention_in = beside_gemm(layer, PlanOpRole::attention_in);
  c.beside_gemm.attention_out = beside_gemm(layer, PlanOpRole::attention_out);
  c.beside_gemm.mlp_in = beside_gemm(layer, PlanOpRole::mlp_in);
  c.beside_gemm.mlp_out = beside_gemm(layer, PlanOpRole::mlp_out);
  c.beside_gemm.head_in = beside_gemm(head, PlanOpRole::head_in);
  return c;
}

}  // namespace partune::backend
