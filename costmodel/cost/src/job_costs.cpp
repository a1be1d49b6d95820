// JobCosts (job_costs.hpp): what one job's pricing reads, built once. The stages' costs
// and collectives are stage_cost.cpp's.
#include "partune/costmodel/job_costs.hpp"

#include <algorithm>
#include <stdexcept>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/expert_grid.hpp"

namespace partune {

namespace {
Placement placement_of(const Job& job) {
  return Placement(job.parallel.placement_strategy, job.data_context_degree(), job.parallel.pipeline_parallel_degree,
                   job.parallel.tensor_parallel_degree);
}

std::vector<TensorCollective> recompute_collectives(const LayerPlan& plan, Checkpointing policy) {
  return tensor_collectives(plan, PlanPass::recompute, policy);
}
}  // namespace

JobCosts::JobCosts(const Job& job)
    : job_(job),
      placement_(placement_of(job)),
      plans_(std::make_shared<const PlanCosts>(plan_costs(job.model, job.cluster.instance.gpu, plan_config(job)))) {
  place();
}

JobCosts::JobCosts(const Job& job, ModelCosts& model) : job_(job), placement_(placement_of(job)) {
  if (&model.model() != &job.model || &model.gpu() != &job.cluster.instance.gpu)
    throw std::logic_error("JobCosts: the model's costs are of another model or GPU than the job's");
  plans_ = model.plans(plan_config(job));
  step_flops_ =
      model.step_flops(job.training.global_batch).at(job.parallel.activation_checkpointing, job.checkpointed_fraction());
  place();
}

StepFlops JobCosts::step_flops() const {
  if (step_flops_) return *step_flops_;
  return partune::step_flops(job_.model, job_.training.global_batch, job_.parallel.activation_checkpointing,
                             job_.checkpointed_fraction());
}

// The groups' spans over the nodes, the recompute pass's collectives, the largest stage,
// the NICs' sharing and a pipeline hop.
void JobCosts::place() {
  const Job& job = job_;
  const InstanceType& inst = job.cluster.instance;
  const int fabric = inst.fabric_gpus();  // the NVLink level: a node or an NVLink domain
  const GroupSpan worst = group_span(placement_, Axis::tensor, fabric);
  const int pp = job.parallel.pipeline_parallel_degree;
  tensor_span_.assign(pp, worst);
  if (worst.nodes > 1 && placement_.stride(Axis::tensor) % fabric != 0) {
    for (int s = 0; s < pp; ++s) tensor_span_[s] = stage_tensor_span(placement_, s, fabric);
    for (const GroupSpan& g : tensor_span_)
      uniform_tensor_ = uniform_tensor_ && g.nodes == worst.nodes && g.per_node == worst.per_node;
  }
  const Checkpointing policy = job.parallel.activation_checkpointing;
  dense_recompute_ = recompute_collectives(plans_->dense, policy);
  // (A dense model's "layer with experts" is the dense one: the programs ask for its lists.)
  moe_recompute_ = job.model.is_moe() ? recompute_collectives(plans_->moe, policy) : dense_recompute_;
  place_expert_and_context_groups(fabric);
  find_largest_stage();
  share_nics_by_stage();
  stages_.assign(pp, std::nullopt);
  // A hop carries one micro-batch's activation (the plan's: a context rank's s / cp
  // tokens) scattered over the tensor group (or its sequence shard: the same bytes),
  // between two GPUs of one node or of two nodes.
  const GroupSpan pp_span = group_span(placement_, Axis::pipeline, fabric);
  const GroupSpan pair{2, pp_span.nodes > 1 ? 2 : 1, pp_span.nodes > 1 ? 1 : 2};
  hop_bytes_ = plans_->dense.activation_bytes / plans_->config.tensor_degree;
  hop_ = pp > 1 ? collective_cost(CollectiveKind::send_recv, CollectiveAlgorithm::ring, hop_bytes_, pair, inst,
                                  job.cluster.oversubscription)
                      .total()
                : 0.0;
}

void JobCosts::place_expert_and_context_groups(int fabric) {
  const Job& job = job_;
  const ParallelConfig& pc = job.parallel;
  expert_span_ = subgroup_span(placement_, Axis::data, std::max(1, pc.expert_parallel_degree), fabric);
  expert_tensor_span_ = tensor_span_[0];
  if (job.model.is_moe() && pc.expert_parallel_degree > 1)  // the allgather dispatcher's block
    expert_block_span_ = members_span(expert_grid_group(job, placement_, 0, ExpertAxis::expert_block), fabric);
  if (job.model.is_moe() && job.expert_tensor_degree() != pc.tensor_parallel_degree) {
    // MoE parallel folding: the expert grid's groups of rank 0 stand for all.
    expert_span_ = members_span(expert_grid_group(job, placement_, 0, ExpertAxis::expert), fabric);
    expert_tensor_span_ = members_span(expert_grid_group(job, placement_, 0, ExpertAxis::expert_tensor), fabric);
  }
  context_span_ = subgroup_span(placement_, Axis::data, std::max(1, pc.context_parallel_degree), fabric);
  if (pc.cp_comm_type == ContextComm::a2a_p2p && pc.context_a2a_degree > 1) {
    // a2a+p2p: the a2a sub-groups are runs of the data axis; the ring takes every a-th
    // member of a context group (rank 0's stands for all).
    const int a = pc.context_a2a_degree;
    context_a2a_span_ = subgroup_span(placement_, Axis::data, a, fabric);
    const std::vector<int> axis = placement_.group(0, Axis::data);
    std::vector<int> ring;
    for (int i = 0; i < pc.context_parallel_degree; i += a) ring.push_back(axis[i]);
    context_span_ = members_span(ring, fabric);
  }
  data_span_ = group_span(placement_, Axis::data, fabric);
  sharded_span_ = subgroup_span(placement_, Axis::data, pc.sharded_data_parallel_degree, fabric);
  const int ep = job.model.is_moe() ? pc.expert_parallel_degree : 1;
  if (ep > 1) {
    // Members ep apart in the data-parallel group: spread over the nodes its expert
    // groups do not fill.
    const int edp = job.expert_data_parallel_degree();
    expert_data_degree_ = edp;
    expert_data_span_ =
        GroupSpan{edp, std::max(1, std::min(edp, data_span_.nodes / std::max(1, expert_span_.nodes))), 1};
    expert_data_span_.per_node = std::max(1, edp / expert_data_span_.nodes);
    if (job.expert_tensor_degree() != pc.tensor_parallel_degree)  // MoE parallel folding: rank 0's group of the grid
      expert_data_span_ = members_span(expert_grid_group(job, placement_, 0, ExpertAxis::expert_data), fabric);
  }
}

// With even stages a middle stage holds only layers: the ends hold the most. With Llama
// 3's stages (ends a layer short) a middle one may hold more: it is looked at too.
void JobCosts::find_largest_stage() {
  const int pp = job_.parallel.pipeline_parallel_degree;
  const RankParameters& rank = plans_->rank;
  int best = 0;
  double most = stage_parameter_count(job_, rank, 0);
  auto look = [&](int s) {
    const double params = stage_parameter_count(job_, rank, s);
    if (params > most) best = s, most = params;
  };
  if (!job_.uniform_middle_stages()) {
    for (int s = 1; s < pp; ++s) look(s);
  } else {
    if (!job_.parallel.stage_layers.empty() && pp > 2) look(1);
    if (pp > 1) look(pp - 1);
  }
  largest_stage_ = best;
  largest_stage_parameters_ = most;
}

}  // namespace partune
