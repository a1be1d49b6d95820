// The stages of a job's costs (JobCosts, job_costs.hpp): each stage's tensor collectives
// and slot, worked out once per stage, and the NICs the stages' tensor groups share.
#include "partune/costmodel/stage_cost.hpp"

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/expert_exchange.hpp"
#include "partune/costmodel/job_costs.hpp"

#include <optional>
#include <utility>

namespace partune {

namespace {

void append(std::vector<TensorCollective>& to, const std::vector<TensorCollective>& from, int times) {
  for (const TensorCollective& c : from) add_folded(to, c, times);
}

bool first_stage_has_embedding(int stage) { return stage == 0; }

}  // namespace

int StageCollectives::count(CollectiveKind kind) const {
  int n = 0;
  for (const auto* pass : {&forward, &backward, &recompute})
    for (const TensorCollective& c : *pass)
      if (c.kind == kind) n += c.count;
  return n;
}

int StageCollectives::count() const {
  return count(CollectiveKind::all_reduce) + count(CollectiveKind::all_gather) +
         count(CollectiveKind::reduce_scatter);
}

StageCollectives stage_tensor_collectives(const Job& job, int stage) { return JobCosts(job).collectives(stage); }

// The GPUs of one stage run its tensor collectives together and share their NICs; GPUs
// of other stages behind the same NIC join them only while they too are in a tensor
// collective: for the share of the step both stages are busy (about m - 1 of
// m + (p - 1) / v slots: a single micro-batch visits one stage at a time) times the share
// of a slot their tensor collectives take (with every GPU communicating).
void JobCosts::share_nics_by_stage() {
  const InstanceType& inst = job_.cluster.instance;
  const int per_nic = inst.gpus_per_nic();
  const int same = same_stage_gpus(placement_, inst.gpus_per_node, per_nic);
  if (same >= per_nic) return;  // every GPU behind a NIC is of one stage: all share it
  const ParallelConfig& pc = job_.parallel;
  const double m = pc.microbatches, busy = (m - 1) / (m + (pc.pipeline_parallel_degree - 1.0) / pc.virtual_stages);
  const StageCost all = stage_cost(0, stage_collectives(0));  // before the sharing: not remembered
  const double talking = all.slot() > 0 ? all.tensor() / all.slot() : 0.0;
  for (GroupSpan& g : tensor_span_) g.nic_sharers = same + (per_nic - same) * busy * talking;
}

double JobCosts::tensor_collective_time(const TensorCollective& c, int stage) const {
  const GroupSpan& span = c.group == PlanGroup::expert          ? expert_span_
                          : c.group == PlanGroup::expert_tensor ? expert_tensor_span_
                          : c.group == PlanGroup::expert_block  ? expert_block_span_
                          : c.group == PlanGroup::context     ? context_span_
                          : c.group == PlanGroup::context_a2a ? context_a2a_span_
                                                              : tensor_span_[stage];
  const CollectivePhases phases = c.group == PlanGroup::expert && c.kind == CollectiveKind::all_to_all
                                      ? expert_exchange_phases(job_, c.bytes, span)
                                      : collective_phases(c.kind, CollectiveAlgorithm::ring, c.bytes, span,
                                                          job_.cluster.instance);
  return c.count * phases_cost(phases, span, job_.cluster.instance, job_.cluster.oversubscription).total();
}

// The stage's collectives: the embedding's on the first stage, each layer's (and each
// recomputed layer's), the head's on the head's stage; equal ones folded into counts.
StageCollectives JobCosts::stage_collectives(int stage) const {
  const LayerMix layers = job_.stage_mix(stage), recomputed = job_.checkpointed_mix(stage);
  const int embedding = first_stage_has_embedding(stage) ? 1 : 0, head = stage == job_.lm_head_stage() ? 1 : 0;
  const PlanCosts& p = *plans_;
  StageCollectives out;
  append(out.forward, p.embedding_comm.forward, embedding);
  append(out.forward, p.dense_comm.forward, layers.dense);
  if (job_.model.is_moe()) append(out.forward, p.moe_comm.forward, layers.moe);  // a dense model has no such layer
  append(out.forward, p.head_comm.forward, head);
  append(out.backward, p.head_comm.backward, head);
  append(out.backward, p.dense_comm.backward, layers.dense);
  if (job_.model.is_moe()) append(out.backward, p.moe_comm.backward, layers.moe);
  append(out.backward, p.embedding_comm.backward, embedding);
  append(out.recompute, dense_recompute_, recomputed.dense);
  append(out.recompute, moe_recompute_, recomputed.moe);
  return out;
}

// Blocking collectives cost their whole time; overlapped ones (the sequence-parallel
// re-gathers beside the backward kernels, context parallelism's p2p ring beside both
// passes) only what the kernels cannot hide, by the ring's compute_overlap rule (the
// simulator applies the same).
const StageCost& JobCosts::cost(int stage) const {
  remember_stage(stage);
  return stages_[stage]->cost;
}

const StageCollectives& JobCosts::collectives(int stage) const {
  remember_stage(stage);
  return stages_[stage]->collectives;
}

void JobCosts::remember_stage(int stage) const {
  std::optional<Stage>& known = stages_.at(stage);
  if (known) return;
  StageCollectives tc = stage_collectives(stage);
  const StageCost cost = stage_cost(stage, tc);
  known = Stage{std::move(tc), cost};
}

StageCost JobCosts::stage_cost(int stage, const StageCollectives& tc) const {
  const LayerMix L = job_.stage_mix(stage), K = job_.checkpointed_mix(stage);
  const Checkpointing policy = job_.parallel.activation_checkpointing;
  const LayerTime &dense = plans_->dense_time, &moe = plans_->moe_time;
  const HeadTime& ht = plans_->head_time;
  StageCost s;
  s.forward = L.dense * dense.forward() + L.moe * moe.forward();
  s.backward = L.dense * dense.backward() + L.moe * moe.backward();
  s.weight = L.dense * dense.backward_weight() + L.moe * moe.backward_weight();
  s.recompute = K.dense * dense.recompute(policy) + K.moe * moe.recompute(policy);
  if (first_stage_has_embedding(stage)) {
    s.forward += ht.embedding_fwd;
    s.backward += ht.embedding_bwd;
  }
  if (stage == job_.lm_head_stage()) {
    s.forward += ht.logits_fwd;
    s.backward += ht.logits_bwd;
    s.weight += ht.logits_weight_bwd;
  }
  double overlapped = 0, blocking = 0, overlapped_forward = 0;
  // By group (tensor, context, expert): blocking time, overlapped time forward and backward.
  double group_blocking[3] = {}, group_forward[3] = {}, group_backward[3] = {};
  const auto group_of = [](const TensorCollective& c) {
    return c.group == PlanGroup::expert || c.group == PlanGroup::expert_tensor || c.group == PlanGroup::expert_block ? 2
           : c.group == PlanGroup::context || c.group == PlanGroup::context_a2a ? 1
                                                                                : 0;
  };
  for (const TensorCollective& c : tc.forward) {
    const double t = tensor_collective_time(c, stage);
    (c.overlapped ? overlapped_forward : s.tensor_forward) += t;
    (c.overlapped ? group_forward : group_blocking)[group_of(c)] += t;
  }
  for (const auto* pass : {&tc.backward, &tc.recompute})
    for (const TensorCollective& c : *pass) {
      const double t = tensor_collective_time(c, stage);
      (c.overlapped ? overlapped : blocking) += t;
      (c.overlapped ? group_backward : group_blocking)[group_of(c)] += t;
    }
  const double hide = job_.cluster.instance.ring.compute_overlap;
  const double exposed_forward = exposed_beside(overlapped_forward, hide, s.forward);
  const double exposed_backward = exposed_beside(overlapped, hide, s.backward);
  s.tensor_forward += exposed_forward;
  s.tensor_backward = blocking + exposed_backward;
  const auto group_time = [&](int g) {
    return group_blocking[g] + (overlapped_forward > 0 ? exposed_forward * group_forward[g] / overlapped_forward : 0.0) +
           (overlapped > 0 ? exposed_backward * group_backward[g] / overlapped : 0.0);
  };
  s.context = group_time(1);
  s.expert = group_time(2);
  return s;
}

}  // namespace partune
