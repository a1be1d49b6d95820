#include "partune/costmodel/stage_cost.hpp"
#include "partune/costmodel/expert_grid.hpp"

#include <algorithm>
#include <utility>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/cost_memo.hpp"

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

StageCollectives stage_tensor_collectives(const Job& job, int stage) {
  return StageCostModel(job).collectives(stage);
}

StageCostModel::StageCostModel(const Job& job)
    : job_(job),
      placement_(job.parallel.placement_strategy, job.data_context_degree(), job.parallel.pipeline_parallel_degree,
                 job.parallel.tensor_parallel_degree) {
  const InstanceType& inst = job.cluster.instance;
  const PlanConfig c = plan_config(job);
  const int fabric = inst.fabric_gpus();  // the NVLink level: a node or an NVLink domain
  const GroupSpan worst = group_span(placement_, Axis::tensor, fabric);
  const int pp = job.parallel.pipeline_parallel_degree;
  tensor_span_.assign(pp, worst);
  if (worst.nodes > 1 && placement_.stride(Axis::tensor) % fabric != 0) {
    for (int s = 0; s < pp; ++s) tensor_span_[s] = stage_tensor_span(placement_, s, fabric);
    for (const GroupSpan& g : tensor_span_)
      uniform_tensor_ = uniform_tensor_ && g.nodes == worst.nodes && g.per_node == worst.per_node;
  }
  layer_ = transformer_layer_plan(job.model, c);
  moe_layer_ = job.model.is_moe() ? moe_layer_plan(job.model, c) : layer_;
  embedding_ = embedding_plan(job.model, c);
  head_ = head_plan(job.model, c);
  const Checkpointing policy = job.parallel.activation_checkpointing;
  for (auto [plan, tc] : {std::pair{&layer_, &layer_tc_}, std::pair{&moe_layer_, &moe_layer_tc_},
                          std::pair{&embedding_, &embedding_tc_}, std::pair{&head_, &head_tc_}}) {
    if (tc == &moe_layer_tc_ && !job.model.is_moe()) continue;  // a dense model has no such layer
    tc->forward = tensor_collectives(*plan, PlanPass::forward);
    tc->backward = tensor_collectives(*plan, PlanPass::backward);
    tc->recompute = tensor_collectives(*plan, PlanPass::recompute, policy);
  }
  layer_time_ = remembered_plan_time(inst.gpu, job.model, c, PlanKind::dense_layer, layer_, c.flash_attention);
  moe_layer_time_ =
      job.model.is_moe()
          ? remembered_plan_time(inst.gpu, job.model, c, PlanKind::moe_layer, moe_layer_, c.flash_attention)
          : layer_time_;
  expert_span_ = subgroup_span(placement_, Axis::data, std::max(1, job.parallel.expert_parallel_degree), fabric);
  expert_tensor_span_ = tensor_span_[0];
  if (job.model.is_moe() && job.parallel.expert_parallel_degree > 1)  // the allgather dispatcher's block
    expert_block_span_ = members_span(expert_grid_group(job, placement_, 0, ExpertAxis::expert_block), fabric);
  if (job.model.is_moe() && job.expert_tensor_degree() != job.parallel.tensor_parallel_degree) {
    // MoE parallel folding: the expert grid's groups of rank 0 stand for all.
    expert_span_ = members_span(expert_grid_group(job, placement_, 0, ExpertAxis::expert), fabric);
    expert_tensor_span_ = members_span(expert_grid_group(job, placement_, 0, ExpertAxis::expert_tensor), fabric);
  }
  context_span_ = subgroup_span(placement_, Axis::data, std::max(1, job.parallel.context_parallel_degree), fabric);
  if (job.parallel.cp_comm_type == ContextComm::a2a_p2p && job.parallel.context_a2a_degree > 1) {
    // a2a+p2p: the a2a sub-groups are runs of the data axis; the ring takes every a-th
    // member of a context group (rank 0's stands for all).
    const int a = job.parallel.context_a2a_degree;
    context_a2a_span_ = subgroup_span(placement_, Axis::data, a, fabric);
    const std::vector<int> axis = placement_.group(0, Axis::data);
    std::vector<int> ring;
    for (int i = 0; i < job.parallel.context_parallel_degree; i += a) ring.push_back(axis[i]);
    context_span_ = members_span(ring, fabric);
  }
  head_time_ = partune::head_time(inst.gpu, job.model, c);
  share_nics_by_stage();
  // A hop carries one micro-batch's activation (the plan's: a context rank's s / cp
  // tokens) scattered over the tensor group (or its sequence shard: the same bytes),
  // between two GPUs of one node or of two nodes.
  const GroupSpan pp_span = group_span(placement_, Axis::pipeline, fabric);
  const GroupSpan pair{2, pp_span.nodes > 1 ? 2 : 1, pp_span.nodes > 1 ? 1 : 2};
  hop_bytes_ = layer_.activation_bytes / c.tensor_degree;
  hop_ = job.parallel.pipeline_parallel_degree > 1
             ? collective_cost(CollectiveKind::send_recv, CollectiveAlgorithm::ring, hop_bytes_, pair,
                               inst, job.cluster.oversubscription)
                   .total()
             : 0.0;
}

// The GPUs of one stage run its tensor collectives together and share their NICs; GPUs
// of other stages behind the same NIC join them only while they too are in a tensor
// collective: for the share of the step both stages are busy (about m - 1 of
// m + (p - 1) / v slots: a single micro-batch visits one stage at a time) times the share
// of a slot their tensor collectives take (with every GPU communicating).
void StageCostModel::share_nics_by_stage() {
  const InstanceType& inst = job_.cluster.instance;
  const int per_nic = inst.gpus_per_nic();
  const int same = same_stage_gpus(placement_, inst.gpus_per_node, per_nic);
  if (same >= per_nic) return;  // every GPU behind a NIC is of one stage: all share it
  const ParallelConfig& pc = job_.parallel;
  const double m = pc.microbatches, busy = (m - 1) / (m + (pc.pipeline_parallel_degree - 1.0) / pc.virtual_stages);
  const StageCost all = cost(0);
  const double talking = all.slot() > 0 ? all.tensor() / all.slot() : 0.0;
  for (GroupSpan& g : tensor_span_) g.nic_sharers = same + (per_nic - same) * busy * talking;
}

double StageCostModel::tensor_collective_time(const TensorCollective& c, int stage) const {
  const GroupSpan& span = c.group == PlanGroup::expert          ? expert_span_
                          : c.group == PlanGroup::expert_tensor ? expert_tensor_span_
                          : c.group == PlanGroup::expert_block  ? expert_block_span_
                          : c.group == PlanGroup::context     ? context_span_
                          : c.group == PlanGroup::context_a2a ? context_a2a_span_
                                                              : tensor_span_[stage];
  return c.count *
         collective_cost(c.kind, CollectiveAlgorithm::ring, c.bytes, span, job_.cluster.instance,
                         job_.cluster.oversubscription)
             .total();
}

// The stage's collectives: the embedding's on the first stage, each layer's (and each
// recomputed layer's), the head's on the head's stage; equal ones folded into counts.
StageCollectives StageCostModel::collectives(int stage) const {
  const LayerMix layers = job_.stage_mix(stage), recomputed = job_.checkpointed_mix(stage);
  const int embedding = first_stage_has_embedding(stage) ? 1 : 0, head = stage == job_.lm_head_stage() ? 1 : 0;
  StageCollectives out;
  append(out.forward, embedding_tc_.forward, embedding);
  append(out.forward, layer_tc_.forward, layers.dense);
  append(out.forward, moe_layer_tc_.forward, layers.moe);
  append(out.forward, head_tc_.forward, head);
  append(out.backward, head_tc_.backward, head);
  append(out.backward, layer_tc_.backward, layers.dense);
  append(out.backward, moe_layer_tc_.backward, layers.moe);
  append(out.backward, embedding_tc_.backward, embedding);
  append(out.recompute, layer_tc_.recompute, recomputed.dense);
  append(out.recompute, moe_layer_tc_.recompute, recomputed.moe);
  return out;
}

// Blocking collectives cost their whole time; overlapped ones (the sequence-parallel
// re-gathers beside the backward kernels, context parallelism's p2p ring beside both
// passes) only what the kernels cannot hide, by the ring's compute_overlap rule (the
// simulator applies the same).
StageCost StageCostModel::cost(int stage) const {
  const LayerMix L = job_.stage_mix(stage), K = job_.checkpointed_mix(stage);
  const Checkpointing policy = job_.parallel.activation_checkpointing;
  StageCost s;
  s.forward = L.dense * layer_time_.forward() + L.moe * moe_layer_time_.forward();
  s.backward = L.dense * layer_time_.backward() + L.moe * moe_layer_time_.backward();
  s.weight = L.dense * layer_time_.backward_weight() + L.moe * moe_layer_time_.backward_weight();
  s.recompute = K.dense * layer_time_.recompute(policy) + K.moe * moe_layer_time_.recompute(policy);
  if (first_stage_has_embedding(stage)) {
    s.forward += head_time_.embedding_fwd;
    s.backward += head_time_.embedding_bwd;
  }
  if (stage == job_.lm_head_stage()) {
    s.forward += head_time_.logits_fwd;
    s.backward += head_time_.logits_bwd;
    s.weight += head_time_.logits_weight_bwd;
  }
  const StageCollectives tc = collectives(stage);
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
