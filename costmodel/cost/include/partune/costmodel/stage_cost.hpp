#pragma once
// One pipeline stage's work for one micro-batch, read from the layer plan: its layers,
// the embedding on the first stage, the LM head on the head's stage, the recompute of its
// checkpointed layers, and the tensor-parallel collectives each of those runs. A job's
// costs (job_costs.hpp, JobCosts::cost) work it out once per stage; the estimator's
// critical stage and the program builder's head placement both read it, so "a stage's
// slot" is one rule.
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/layer_plan.hpp"

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

}  // namespace partune
