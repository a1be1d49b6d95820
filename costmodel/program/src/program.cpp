// The program contract's helpers (program.hpp): names of the op kinds and groups, which
// kinds compute or communicate, who is in a communication group, and which algorithm
// a collective uses.
#include <algorithm>
#include <vector>

#include "partune/costmodel/placement.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/expert_exchange.hpp"
#include "partune/costmodel/expert_grid.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/sharding.hpp"

namespace partune {

const char* to_string(OpKind k) {
  switch (k) {
    case OpKind::forward: return "forward";
    case OpKind::recompute: return "recompute";
    case OpKind::backward: return "backward";
    case OpKind::backward_weight: return "backward_weight";
    case OpKind::send_activation: return "send_activation";
    case OpKind::recv_activation: return "recv_activation";
    case OpKind::send_gradient: return "send_gradient";
    case OpKind::recv_gradient: return "recv_gradient";
    case OpKind::all_reduce: return "all_reduce";
    case OpKind::all_gather: return "all_gather";
    case OpKind::reduce_scatter: return "reduce_scatter";
    case OpKind::all_to_all: return "all_to_all";
    case OpKind::optimizer_step: return "optimizer_step";
    case OpKind::offload: return "offload";
    case OpKind::reload: return "reload";
    case OpKind::offload_gradients: return "offload_gradients";
    case OpKind::reload_parameters: return "reload_parameters";
    case OpKind::wait: return "wait";
  }
  return "?";
}

const char* to_string(CommGroup g) {
  switch (g) {
    case CommGroup::none: return "none";
    case CommGroup::tensor: return "tensor";
    case CommGroup::data: return "data";
    case CommGroup::sharded: return "sharded";
    case CommGroup::replica: return "replica";
    case CommGroup::embedding: return "embedding";
    case CommGroup::expert: return "expert";
    case CommGroup::expert_data: return "expert_data";
    case CommGroup::context: return "context";
    case CommGroup::context_a2a: return "context_a2a";
    case CommGroup::expert_tensor: return "expert_tensor";
    case CommGroup::expert_block: return "expert_block";
  }
  return "?";
}

bool is_compute(OpKind k) {
  return k == OpKind::forward || k == OpKind::recompute || k == OpKind::backward ||
         k == OpKind::backward_weight || k == OpKind::optimizer_step;
}

bool is_collective(OpKind k) { return collective_of(k).has_value(); }

std::optional<CollectiveKind> collective_of(OpKind k) {
  switch (k) {
    case OpKind::all_reduce: return CollectiveKind::all_reduce;
    case OpKind::all_gather: return CollectiveKind::all_gather;
    case OpKind::reduce_scatter: return CollectiveKind::reduce_scatter;
    case OpKind::all_to_all: return CollectiveKind::all_to_all;
    default: return std::nullopt;
  }
}

std::vector<int> comm_group_members(const Job& job, int rank, CommGroup kind) {
  const Placement p(job.parallel.placement_strategy, job.data_context_degree(), job.parallel.pipeline_parallel_degree,
                    job.parallel.tensor_parallel_degree);
  const int sdp = job.parallel.sharded_data_parallel_degree;
  switch (kind) {
    case CommGroup::tensor: return p.group(rank, Axis::tensor);
    case CommGroup::data: return p.group(rank, Axis::data);
    case CommGroup::sharded: {
      // Consecutive data-parallel indices form a sharded group.
      const std::vector<int> dp = p.group(rank, Axis::data);
      const int d = p.coords(rank).data, first = d / sdp * sdp;
      return std::vector<int>(dp.begin() + first, dp.begin() + first + sdp);
    }
    case CommGroup::expert:
    case CommGroup::expert_data:
    case CommGroup::expert_tensor:
    case CommGroup::expert_block: {
      // The expert grid over the stage's tensor x data ranks (Megatron-core's etp-ep-edp).
      if (!job.model.is_moe() || job.parallel.expert_parallel_degree <= 1) break;
      const ExpertAxis axis = kind == CommGroup::expert          ? ExpertAxis::expert
                              : kind == CommGroup::expert_data   ? ExpertAxis::expert_data
                              : kind == CommGroup::expert_tensor ? ExpertAxis::expert_tensor
                                                                 : ExpertAxis::expert_block;
      std::vector<int> members = expert_grid_group(job, p, rank, axis);
      std::sort(members.begin(), members.end());
      return members;
    }
    case CommGroup::context:
    case CommGroup::context_a2a: {
      // Consecutive members of the data axis form a context group (Megatron's tp-cp-dp);
      // with a2a+p2p, runs of a of them the a2a sub-groups, and the members at one place
      // in their sub-group the ring.
      const ParallelConfig& pc = job.parallel;
      const int cp = pc.context_parallel_degree;
      const bool hierarchical = pc.cp_comm_type == ContextComm::a2a_p2p && pc.context_a2a_degree > 1;
      if (cp <= 1 || (kind == CommGroup::context_a2a && !hierarchical)) break;
      const std::vector<int> axis = p.group(rank, Axis::data);
      const int d = p.coords(rank).data, first = d / cp * cp;
      if (!hierarchical) return std::vector<int>(axis.begin() + first, axis.begin() + first + cp);
      const int a = pc.context_a2a_degree;
      std::vector<int> out;
      if (kind == CommGroup::context_a2a) {
        const int sub = d / a * a;
        return std::vector<int>(axis.begin() + sub, axis.begin() + sub + a);
      }
      for (int i = first + d % a; i < first + cp; i += a) out.push_back(axis[i]);
      return out;
    }
    case CommGroup::replica: {
      // The same shard index in every sharded group.
      const std::vector<int> dp = p.group(rank, Axis::data);
      std::vector<int> out;
      for (int d = p.coords(rank).data % sdp; d < static_cast<int>(dp.size()); d += sdp) out.push_back(dp[d]);
      return out;
    }
    case CommGroup::embedding: {
      // The first and the last stage with this rank's data and tensor coordinates, when
      // the job keeps two copies of a tied embedding.
      const int p_degree = job.parallel.pipeline_parallel_degree;
      RankCoords c = p.coords(rank);
      if (!job.tied_embedding_copies() || (c.pipeline != 0 && c.pipeline != p_degree - 1)) break;
      c.pipeline = 0;
      const int first = p.rank(c);
      c.pipeline = p_degree - 1;
      const int last = p.rank(c);
      return first < last ? std::vector<int>{first, last} : std::vector<int>{last, first};
    }
    case CommGroup::none: break;
  }
  return {rank};
}

CollectivePhases program_collective_phases(const Job& job, CommGroup group, OpKind kind, double bytes,
                                           const GroupSpan& span) {
  const CollectiveKind collective = *collective_of(kind);
  if (group == CommGroup::expert && collective == CollectiveKind::all_to_all)
    return expert_exchange_phases(job, bytes, span);
  return collective_phases(collective, collective_algorithm(job.parallel, group, kind), bytes, span,
                           job.cluster.instance);
}

CollectiveAlgorithm collective_algorithm(const ParallelConfig& pc, CommGroup group, OpKind kind) {
  switch (group) {
    case CommGroup::data:
    case CommGroup::expert_data:
    case CommGroup::replica: return pc.data_parallel_collective;
    case CommGroup::sharded:
      // The SMDDP all-to-all exists for the all-gather only (seed 003); a ring all-gather
      // runs within each node first, then across nodes, where the flavour says so
      // (SMP's sdp_hierarchical_allgather).
      if (kind == OpKind::reduce_scatter && pc.sharded_collective == CollectiveAlgorithm::all_to_all)
        return CollectiveAlgorithm::ring;
      if (kind == OpKind::all_gather && pc.sharded_collective == CollectiveAlgorithm::ring &&
          sharding_settings(pc).hierarchical_allgather)
        return CollectiveAlgorithm::hierarchical;
      return pc.sharded_collective;
    default: return CollectiveAlgorithm::ring;
  }
}

BucketExtras bucket_extras(const Job& job, int stage, int chunk, int layer) {
  const int pp = job.parallel.pipeline_parallel_degree, v = job.parallel.virtual_stages;
  const int model_stage = model_chunk(job.parallel, stage, chunk);
  const bool first = model_stage == 0, last = model_stage == pp * v - 1;
  const bool head_first = job.lm_head_on_first_stage();
  BucketExtras out;
  out.embedding = layer == 0 && first;
  // (A chunk without layers carries its embedding or head in bucket 0.)
  out.head = head_first ? (layer == 0 && first) : (layer == std::max(0, job.layers_in_chunk(stage, chunk) - 1) && last);
  return out;
}

}  // namespace partune
