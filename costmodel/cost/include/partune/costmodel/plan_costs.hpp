#pragma once
// What every job of one model on one GPU at one PlanConfig shares, built once: the layer,
// embedding and head plans, their op times, their tensor collectives by pass and one rank's
// parameters. A job's costs (job_costs.hpp) read them. A search over one model holds a
// ModelCosts, which builds them once for each configuration its points ask for (and the
// model's step FLOPs once per global batch), and hands them to each point's JobCosts.
#include <map>
#include <memory>
#include <vector>

#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/parameter_count.hpp"

namespace partune {

// A plan's tensor collectives in the forward and the backward pass (tensor_collectives;
// the recompute pass's depend on the job's checkpointing: JobCosts lists them).
struct PassCollectives {
  std::vector<TensorCollective> forward, backward;
};

struct PlanCosts {
  PlanConfig config;
  LayerPlan dense, moe, embedding, head;  // moe: the dense plan again for a dense model
  LayerTime dense_time, moe_time;         // plan_time at config's precision and FlashAttention
  HeadTime head_time;
  PassCollectives dense_comm, moe_comm, embedding_comm, head_comm;
  RankParameters rank;  // rank_parameters of these plans

  const LayerPlan& layer(bool with_experts) const { return with_experts ? moe : dense; }
  const LayerTime& layer_time(bool with_experts) const { return with_experts ? moe_time : dense_time; }
  const PassCollectives& layer_comm(bool with_experts) const { return with_experts ? moe_comm : dense_comm; }
};
PlanCosts plan_costs(const ModelSpec& model, const GpuProfile& gpu, const PlanConfig& config);

// One model on one GPU, for many jobs that differ only in their parallel and training
// knobs (a search's points): the PlanCosts of each configuration asked for and the
// model's step FLOPs of each global batch, each built on the first request. It refers to
// `model` and `gpu` (those objects, unchanged while it lives); one per thread.
class ModelCosts {
 public:
  ModelCosts(const ModelSpec& model, const GpuProfile& gpu) : model_(model), gpu_(gpu) {}
  const ModelSpec& model() const { return model_; }
  const GpuProfile& gpu() const { return gpu_; }
  std::shared_ptr<const PlanCosts> plans(const PlanConfig& config);
  const ModelStepFlops& step_flops(double global_batch);

 private:
  struct Less {
    bool operator()(const PlanConfig& a, const PlanConfig& b) const { return plan_config_less(a, b); }
  };
  const ModelSpec& model_;
  const GpuProfile& gpu_;
  std::map<PlanConfig, std::shared_ptr<const PlanCosts>, Less> plans_;
  std::shared_ptr<const PlanCosts> last_;  // consecutive points mostly share their plans
  double flops_batch_ = -1;
  ModelStepFlops flops_;
};

}  // namespace partune
