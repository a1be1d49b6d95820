// Selective checkpointing by module (layer_plan.hpp's apply_module_checkpointing), as
// Megatron-Core runs its --recompute-modules (megatron/core/transformer/
// transformer_config.py's recompute_modules; transformer_layer.py, multi_latent_
// attention.py, moe/moe_layer.py, moe/experts.py):
//   - "output-discarding" modules (layernorm, mla_up_proj, moe_act: Megatron's
//     CheckpointWithoutOutput) free their output once the op after them has read it and
//     run again before that op's backward: the op after them no longer keeps it;
//   - "normal" modules (core_attn, mlp, moe, shared_experts: tensor_parallel.checkpoint)
//     keep their input alone and run their whole forward again in backward, the tensor
//     collectives inside them included.
#include <initializer_list>

#include "partune/costmodel/layer_plan.hpp"

namespace partune {

namespace {

bool is_one_of(PlanOpRole role, std::initializer_list<PlanOpRole> roles) {
  for (PlanOpRole r : roles)
    if (r == role) return true;
  return false;
}

// A checkpointed module: its ops recomputed, and all they kept dropped but `input`,
// which the first of them keeps (the module's input).
void checkpoint_module(LayerPlan& plan, std::initializer_list<PlanOpRole> roles, double input) {
  bool first = true;
  for (PlanOp& op : plan.ops) {
    if (!is_one_of(op.role, roles)) continue;
    op.selective_recompute = true;
    op.selective_dropped = op.stored - (first ? input : 0.0);
    first = false;
  }
}

// An output-discarding module: its ops recomputed; the ops that read its output no longer
// keep it (`consumers`' stored bytes dropped).
void discard_output(LayerPlan& plan, std::initializer_list<PlanOpRole> module,
                    std::initializer_list<PlanOpRole> consumers) {
  bool any = false;
  for (const PlanOp& op : plan.ops) any = any || is_one_of(op.role, module);
  if (!any) return;
  for (PlanOp& op : plan.ops) {
    if (is_one_of(op.role, module)) op.selective_recompute = true;
    if (is_one_of(op.role, consumers)) op.selective_dropped = op.stored;
  }
}

}  // namespace

void apply_module_checkpointing(LayerPlan& plan, RecomputeModules modules) {
  if (plan.part != PlanPart::layer || modules == kDefaultRecomputeModules) return;
  using R = PlanOpRole;
  for (PlanOp& op : plan.ops)  // core_attn: the attention core (the plan's own default)
    if (op.kind == PlanOpKind::attention_core) op.selective_recompute = has_module(modules, RecomputeModule::core_attn);
  if (has_module(modules, RecomputeModule::layernorm))
    discard_output(plan, {R::input_norm, R::mlp_norm}, {R::qkv, R::q_down, R::fc1, R::shared_fc1});
  if (has_module(modules, RecomputeModule::mla_up_proj))
    // The up projections' and rotary's outputs are the core's queries, keys and values.
    discard_output(plan, {R::q_up, R::kv_up, R::rotary}, {R::attention});
  if (has_module(modules, RecomputeModule::moe_act))
    discard_output(plan, {R::expert_activation}, {R::expert_fc2});
  const double input = plan.input_bytes;
  if (has_module(modules, RecomputeModule::mlp) && plan.find(R::fc1))
    checkpoint_module(plan, {R::mlp_in, R::fc1, R::activation, R::fc2, R::mlp_out}, plan.op(R::fc1).stored);
  if (has_module(modules, RecomputeModule::shared_experts) && plan.find(R::shared_fc1))
    checkpoint_module(plan, {R::mlp_in, R::shared_fc1, R::shared_activation, R::shared_fc2, R::mlp_out},
                      plan.op(R::shared_fc1).stored);
  if (has_module(modules, RecomputeModule::moe) && plan.find(R::router))
    checkpoint_module(plan,
                      {R::router, R::routing, R::token_gather, R::dispatch, R::expert_gather, R::expert_fc1, R::expert_activation,
                       R::expert_fc2, R::expert_scatter, R::combine, R::unpermute, R::token_scatter, R::mlp_in, R::shared_fc1,
                       R::shared_activation, R::shared_fc2, R::mlp_out},
                      input);
}

}  // namespace partune
