// The model's region-edge conjugates read from the layer plans (conjugates.hpp).
#include <stdexcept>
#include <string>

#include "partune/backend/conjugates.hpp"

namespace partune::backend {

namespace {

// The conjugate of the plan's tensor_comm op `name`; `fallback` when the plan has none
// (tensor degree 1: no communication, and f / g are the identity there).
Conjugate edge(const LayerPlan& plan, const char* name, Conjugate fallback) {
  const PlanOp* op = plan.find(name);
  if (!op) return fallback;
  if (op->kind != PlanOpKind::tensor_comm)
    throw std::logic_error(std::string("layer plan: ") + name + " is not a tensor_comm op");
  return op->conjugate;
}

}  // namespace

LayerConjugates layer_conjugates(const Job& job) {
  const PlanConfig config = plan_config(job);
  const LayerPlan layer = transformer_layer_plan(job.model, config);
  const LayerPlan embedding = embedding_plan(job.model, config);
  const LayerPlan head = head_plan(job.model, config);
  LayerConjugates c;
  c.attention_in = edge(layer, "attention_in", c.attention_in);
  c.attention_out = edge(layer, "attention_out", c.attention_out);
  c.mlp_in = edge(layer, "mlp_in", c.mlp_in);
  c.mlp_out = edge(layer, "mlp_out", c.mlp_out);
  c.embedding_out = edge(embedding, "embedding_out", c.embedding_out);
  c.head_in = edge(head, "head_in", c.head_in);
  return c;
}

}  // namespace partune::backend
