#pragma once
// One pipeline stage's work for one micro-batch, read from the layer plan: its layers,
// the embedding on the first stage, the LM head on the head's stage, the recompute of its
// checkpointed layers, and the tensor-parallel collectives each of those runs. The
// estimator's critical stage and the program builder's head placement both read it, so
// "a stage's slot" is one rule.
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune {

// Tensor collectives (and a layer with experts' all-to-alls over the expert group) one
// stage runs for one micro-batch, by pass (Megatron's rule, read from the plans: 2 + 2
// per layer without sequence parallelism, the embedding's g
// forward on its stage, the head's f backward and the loss's three reductions forward on
// the head's stage, the layer's forward again per fully recomputed layer).
struct StageCollectives {
  std::vector<TensorCollective> forward, backward, recompute;  // equal ones folded
  int count(CollectiveKind kind) const;  // over the three passes
  int count() const;
};
StageCollectives stage_tensor_collectives(const Job& job, int stage);

// What `comm` seconds of communication beside `compute` seconds of kernels add to the
// kernels' time, when the kernels progress at `overlap` of their rate while it runs (a
// GPU-driven collective holds SMs; the simulator's rule, sim/slowdown.cpp): the
// kernels end after min(compute / overlap, compute + (1 - overlap) comm), the
// communication after comm, so the pair takes max(comm - compute, (1 - overlap) comm)
// beyond the kernels. (Once the communication outlasts the kernels its time is exposed
// from their end; the slowing then hides under it, not on top.)
inline double exposed_beside(double comm, double overlap, double compute) {
  if (comm <= 0) return 0;
  const double slowed = (1.0 - overlap) * comm;
  return comm - compute > slowed ? comm - compute : slowed;
}

struct StageCost {
  double forward = 0, backward = 0, recompute = 0;  // kernels
  double weight = 0;  // of backward, the weight gradients (a split backward's W step)
  double tensor_forward = 0;    // blocking tensor collectives of the forward, plus the
                                // exposed part of the overlapped ones (context's p2p ring)
  double tensor_backward = 0;   // of the backward and the recompute, plus the exposed part
                                // of the overlapped ones (sequence-parallel re-gathers)
  // Of tensor_forward + tensor_backward, the context group's collectives (context
  // parallelism's K/V exchange, both of its sub-groups) and the expert group's (the
  // experts' token all-to-alls); an overlapped collective's exposed part is shared among
  // the groups by their time. The rest is the tensor group's.
  double context = 0, expert = 0;
  double forward_slot() const { return forward + tensor_forward; }
  double backward_slot() const { return backward + recompute + tensor_backward; }
  double slot() const { return forward_slot() + backward_slot(); }
  double kernels() const { return forward + backward + recompute; }
  double tensor() const { return tensor_forward + tensor_backward; }
};

// The plans and per-op times of a job, built once, and each stage's cost from them.
class StageCostModel {
 public:
  explicit StageCostModel(const Job& job);
  StageCost cost(int stage) const;
  // The stage's tensor collectives per micro-batch (equal ones folded into counts).
  StageCollectives collectives(int stage) const;
  // Time of one plan collective of this kind and size on the stage's tensor groups (or on
  // the expert groups, for the all-to-alls)
  // (the worst of them: a degree that does not divide a node straddles nodes in some
  // stages only).
  double tensor_collective_time(const TensorCollective& c, int stage) const;
  // Whether every stage's tensor groups lie alike on the nodes (stages then differ only
  // by what they hold: first, middle, last).
  bool uniform_tensor_groups() const { return uniform_tensor_; }
  // One activation (or gradient) transfer between neighbouring stages: its time, and its
  // bytes (the plan's activation over the tensor group).
  double pipeline_hop() const { return hop_; }
  double hop_bytes() const { return hop_bytes_; }

  const LayerPlan& layer() const { return layer_; }
  // A layer with experts (the dense plan again for a dense model).
  const LayerPlan& moe_layer() const { return moe_layer_; }
  const LayerTime& moe_layer_time() const { return moe_layer_time_; }
  // The plan and times of one kind of layer.
  const LayerPlan& layer(bool moe) const { return moe ? moe_layer_ : layer_; }
  const LayerTime& layer_time(bool moe) const { return moe ? moe_layer_time_ : layer_time_; }
  // The span of the expert groups (expert_grid.hpp: expert_parallel_degree consecutive
  // data-parallel ranks when the experts take the tensor degree).
  const GroupSpan& expert_span() const { return expert_span_; }
  // The span of the context groups (context_parallel_degree consecutive members of the
  // data axis).
  const GroupSpan& context_span() const { return context_span_; }
  const LayerPlan& embedding() const { return embedding_; }
  const LayerPlan& head() const { return head_; }
  // The span of the stage's tensor groups (the worst of them).
  const GroupSpan& tensor_span(int stage) const { return tensor_span_[stage]; }
  const LayerTime& layer_time() const { return layer_time_; }
  const HeadTime& head_time() const { return head_time_; }

 private:
  void share_nics_by_stage();

  const Job& job_;
  Placement placement_;
  std::vector<GroupSpan> tensor_span_;  // per stage
  bool uniform_tensor_ = true;
  LayerPlan layer_, moe_layer_, embedding_, head_;
  // Each plan's tensor collectives by pass (tensor_collectives), listed once: a stage's
  // are these times its layers.
  struct PassCollectives {
    std::vector<TensorCollective> forward, backward, recompute;
  } layer_tc_, moe_layer_tc_, embedding_tc_, head_tc_;
  LayerTime layer_time_, moe_layer_time_;
  GroupSpan expert_span_, expert_tensor_span_, expert_block_span_, context_span_, context_a2a_span_;
  HeadTime head_time_;
  double hop_ = 0, hop_bytes_ = 0;
};

}  // namespace partune
