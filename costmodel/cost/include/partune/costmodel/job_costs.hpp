#pragma once
// One job's costs, built once and read by everything that prices the job (Calculon's
// "compile once, query many"): the estimator and its memory verdict, every rank's program
// builder, the stage partitioner and the search's judge. It holds the placement and its
// group spans, the plans, their op times and tensor collectives (PlanCosts, shared by every
// job of the model at the same PlanConfig), the step's FLOPs, one rank's parameters and
// the stage with the most, and each stage's cost and collectives, worked out the first time
// a stage is asked for. Memory per stage is the estimate room's (memory.hpp), read from it.
#include <memory>
#include <optional>
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/costmodel/plan_costs.hpp"
#include "partune/costmodel/stage_cost.hpp"

namespace partune {

// A plan's tensor collectives in each pass (the recompute pass's under the job's
// checkpointing; none for the embedding and the head).
struct PlanCollectives {
  const std::vector<TensorCollective>& forward;
  const std::vector<TensorCollective>& backward;
  const std::vector<TensorCollective>& recompute;
};

// One thread reads a JobCosts at a time: a stage's cost is filled in when first asked for.
class JobCosts {
 public:
  // Builds the job's plans itself.
  explicit JobCosts(const Job& job);
  // Takes them (and the step FLOPs) from `model`, which must hold job.model and the job's
  // GPU (those objects: std::logic_error otherwise).
  JobCosts(const Job& job, ModelCosts& model);
  JobCosts(const JobCosts&) = delete;
  JobCosts& operator=(const JobCosts&) = delete;

  const Job& job() const { return job_; }
  const Placement& placement() const { return placement_; }
  const PlanCosts& plans() const { return *plans_; }
  const RankParameters& rank() const { return plans_->rank; }
  // The model and hardware FLOPs of one step (flops.hpp's step_flops).
  StepFlops step_flops() const;

  // --- stages (stage_cost.cpp)
  // One stage's slot for one micro-batch, and its tensor collectives (equal ones folded).
  const StageCost& cost(int stage) const;
  const StageCollectives& collectives(int stage) const;
  // Time of one plan collective of this kind and size on the stage's tensor groups (or on
  // the expert or context groups) (the worst of them: a degree that does not divide a node
  // straddles nodes in some stages only).
  double tensor_collective_time(const TensorCollective& c, int stage) const;
  // Whether every stage's tensor groups lie alike on the nodes (stages then differ only
  // by what they hold: first, middle, last).
  bool uniform_tensor_groups() const { return uniform_tensor_; }
  // One activation (or gradient) transfer between neighbouring stages: its time, and its
  // bytes (the plan's activation over the tensor group).
  double pipeline_hop() const { return hop_; }
  double hop_bytes() const { return hop_bytes_; }

  // --- the plans and their times (PlanCosts)
  const LayerPlan& layer() const { return plans_->dense; }
  const LayerPlan& moe_layer() const { return plans_->moe; }  // the dense plan for a dense model
  const LayerPlan& layer(bool moe) const { return plans_->layer(moe); }
  const LayerTime& layer_time() const { return plans_->dense_time; }
  const LayerTime& layer_time(bool moe) const { return plans_->layer_time(moe); }
  const LayerPlan& embedding() const { return plans_->embedding; }
  const LayerPlan& head() const { return plans_->head; }
  const HeadTime& head_time() const { return plans_->head_time; }
  PlanCollectives layer_collectives(bool moe) const {
    return {plans_->layer_comm(moe).forward, plans_->layer_comm(moe).backward, moe ? moe_recompute_ : dense_recompute_};
  }
  PlanCollectives embedding_collectives() const {
    return {plans_->embedding_comm.forward, plans_->embedding_comm.backward, no_collectives_};
  }
  PlanCollectives head_collectives() const {
    return {plans_->head_comm.forward, plans_->head_comm.backward, no_collectives_};
  }

  // --- group spans
  // The span of the stage's tensor groups (the worst of them).
  const GroupSpan& tensor_span(int stage) const { return tensor_span_[stage]; }
  // The expert groups (expert_grid.hpp: expert_parallel_degree consecutive data-parallel
  // ranks when the experts take the tensor degree), the context groups
  // (context_parallel_degree consecutive members of the data axis).
  const GroupSpan& expert_span() const { return expert_span_; }
  const GroupSpan& context_span() const { return context_span_; }
  // The gradients' group (data x context ranks) and its sharded sub-groups.
  const GroupSpan& data_span() const { return data_span_; }
  const GroupSpan& sharded_span() const { return sharded_span_; }
  // Expert parallelism's expert-data groups (the same expert rank in each expert group),
  // over which the experts' gradients are reduced: degree 1 without experts.
  int expert_data_degree() const { return expert_data_degree_; }
  const GroupSpan& expert_data_span() const { return expert_data_span_; }

  // --- parameter counts
  // The stage with the most parameters, which synchronises (and updates) the most.
  int largest_stage() const { return largest_stage_; }
  double largest_stage_parameters() const { return largest_stage_parameters_; }

 private:
  void place();
  void place_expert_and_context_groups(int fabric);
  void find_largest_stage();
  void share_nics_by_stage();
  StageCollectives stage_collectives(int stage) const;
  StageCost stage_cost(int stage, const StageCollectives& tc) const;
  void remember_stage(int stage) const;

  const Job& job_;
  Placement placement_;
  std::shared_ptr<const PlanCosts> plans_;
  std::optional<StepFlops> step_flops_;  // from the model's costs; else built when asked
  // The recompute pass's collectives of a dense layer and of a layer with experts.
  std::vector<TensorCollective> dense_recompute_, moe_recompute_, no_collectives_;
  std::vector<GroupSpan> tensor_span_;  // per stage
  bool uniform_tensor_ = true;
  GroupSpan expert_span_, expert_tensor_span_, expert_block_span_, context_span_, context_a2a_span_;
  GroupSpan data_span_, sharded_span_, expert_data_span_;
  int expert_data_degree_ = 1;
  int largest_stage_ = 0;
  double largest_stage_parameters_ = 0;
  double hop_ = 0, hop_bytes_ = 0;
  // Each stage's collectives and cost, once asked for.
  struct Stage {
    StageCollectives collectives;
    StageCost cost;
  };
  mutable std::vector<std::optional<Stage>> stages_;
};

}  // namespace partune
