#include "partune/costmodel/plan_costs.hpp"

namespace partune {

PlanCosts plan_costs(const ModelSpec& model, const GpuProfile& gpu, const PlanConfig& config) {
  PlanCosts p;
  p.config = config;
  p.dense = transformer_layer_plan(model, config);
  p.moe = model.is_moe() ? moe_layer_plan(model, config) : p.dense;
  p.embedding = embedding_plan(model, config);
  p.head = head_plan(model, config);
  p.dense_time = plan_time(gpu, p.dense, config.precision, config.flash_attention);
  p.moe_time = model.is_moe() ? plan_time(gpu, p.moe, config.precision, config.flash_attention) : p.dense_time;
  p.head_time = head_time(gpu, p.embedding, p.head, config);
  auto passes = [](const LayerPlan& plan) {
    return PassCollectives{tensor_collectives(plan, PlanPass::forward), tensor_collectives(plan, PlanPass::backward)};
  };
  p.dense_comm = passes(p.dense);
  p.moe_comm = model.is_moe() ? passes(p.moe) : p.dense_comm;
  p.embedding_comm = passes(p.embedding);
  p.head_comm = passes(p.head);
  p.rank = rank_parameters(p.dense, p.moe, p.embedding, p.head);
  return p;
}

std::shared_ptr<const PlanCosts> ModelCosts::plans(const PlanConfig& config) {
  if (last_ && same_plan_config(last_->config, config)) return last_;
  auto it = plans_.find(config);
  if (it == plans_.end())
    it = plans_.emplace(config, std::make_shared<const PlanCosts>(plan_costs(model_, gpu_, config))).first;
  last_ = it->second;
  return last_;
}

const ModelStepFlops& ModelCosts::step_flops(double global_batch) {
  if (global_batch != flops_batch_) {
    flops_ = model_step_flops(model_, global_batch);
    flops_batch_ = global_batch;
  }
  return flops_;
}

}  // namespace partune
