// Which ranks one simulated rank may stand for (simulator.md §5.8): blocks of
// data-parallel replicas that own their nodes, and one rank per tensor-parallel group.
#include "partune/sim/simulator.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "partune/costmodel/placement.hpp"

namespace partune::sim {

bool tensor_groups_are_symmetric(const Job& job) {
  // Members of a tensor-parallel group run the same program; when the group sits in one
  // node, its rank 0 stands for all: its collectives go up and down its own NVSwitch port,
  // and its network and PCIe transfers carry the bytes of the members that share its NIC
  // or PCIe switch (they move identical amounts at the same moments).
  const int tp = job.parallel.tensor_parallel_degree;
  if (tp <= 1) return false;
  // An oversubscribed node's uplink carries every NIC's traffic: the member standing for
  // its group loads its own NIC with its sharers' bytes, but the other NICs' share of the
  // uplink would be missing (GPT-3 2.7B on 24 p4d, pp 4 tp 8, oversubscription 3: 0.799 s
  // folded against 0.970 s with every rank).
  if (job.cluster.oversubscription > 1.0) return false;
  const Placement p(job.parallel.placement_strategy, job.data_context_degree(), job.parallel.pipeline_parallel_degree,
                    tp);
  return group_span(p, Axis::tensor, job.cluster.instance.gpus_per_node).nodes == 1 &&
         p.stride(Axis::tensor) * tp <= job.cluster.instance.gpus_per_node;
}

int replica_cluster_size(const Job& job, std::string* why_not) {
  auto no = [&](const char* reason) {
    if (why_not) *why_not = reason;
    return 0;
  };
  const int dp = job.data_context_degree(), world = job.world_size();
  const int sdp = job.parallel.sharded_data_parallel_degree;
  if (dp <= 1) return no("there is one data-parallel replica");
  if (job.cluster.instance.fabric_gpus() > job.cluster.instance.gpus_per_node)
    return no("NVLink domains span nodes: every rank is simulated");
  const Placement p(job.parallel.placement_strategy, dp, job.parallel.pipeline_parallel_degree,
                    job.parallel.tensor_parallel_degree);
  const int G = job.cluster.instance.gpus_per_node;
  // The replicas that share nodes with replica 0, and those sharing nodes with them, ...
  std::vector<bool> in(dp, false);
  in[0] = true;
  for (bool grew = true; grew;) {
    grew = false;
    for (int r = 0; r < world; ++r) {
      if (!in[p.coords(r).data]) continue;
      const int first = r / G * G;
      for (int q = first; q < std::min(world, first + G); ++q)
        if (!in[p.coords(q).data]) in[p.coords(q).data] = true, grew = true;
    }
  }
  int size = 0;
  while (size < dp && in[size]) ++size;
  for (int d = size; d < dp; ++d)
    if (in[d]) return no("the replicas sharing nodes with replica 0 are not a leading block");
  if (size == dp) return no("every replica shares nodes with the others");
  if (dp % size != 0) return no("the replicas do not split into equal blocks of nodes");
  // The block grows to whole sharded, expert and context groups (runs of consecutive
  // replicas), whose collectives then run inside it; the groups that span blocks are the
  // replica groups of a sharded job (the same shard in every sharded group), else the
  // data-parallel groups and the expert-data ones (stride ep).
  int ep = job.model.is_moe() ? job.parallel.expert_parallel_degree : 1;
  const int t = job.parallel.tensor_parallel_degree;
  if (ep > 1) {
    // The expert grid's blocks (etp x ep places: an expert group with its expert-tensor
    // ranks, the allgather dispatcher's group) cover etp x ep / t replicas.
    const int places = job.expert_tensor_degree() * ep;
    if (places % t != 0) return no("the expert grid's groups do not cover whole replicas");
    ep = places / t;
  }
  const int cp = job.parallel.context_parallel_degree;
  int block = size;
  for (int g : {sdp, ep, cp})
    if (g > 1) block = std::lcm(block, g);
  if (block >= dp) return no("sharded, expert or context groups span every block of replicas");
  if (dp % block != 0) return no("sharded, expert or context groups do not split the replicas into equal blocks");
  // The spanning group's members are `stride` replicas apart: a sharded job's replica
  // groups (its data-parallel group is not used: check_job refuses sharding with MoE and
  // with the zero-bubble schedules, and sharded gradients take no buckets), else the whole
  // data axis (which holds the expert-data groups' members too). Exactness: its members
  // inside the block sit on one node, so every network successor lies outside the block
  // and its mirror loads the same links.
  const int stride = sdp > 1 ? sdp : 1;
  for (int r = 0; r < world; ++r) {
    RankCoords c = p.coords(r);
    if (c.data >= block) continue;
    const int node = r / G;
    for (int d = c.data % stride; d < block; d += stride) {
      c.data = d;
      if (p.rank(c) / G != node) return no("a group spanning blocks of replicas spans nodes inside a block");
    }
  }
  return block;
}

Folding simulation_folding(const Job& job, const SimOptions& options) {
  // Ranks sharing a node's cores slow each other down, and slow GPUs make ranks differ:
  // every one of them must run.
  if (!options.use_symmetry || job.cluster.instance.ranks_share_host_compute() || !options.slowdowns.empty()) return {};
  return {replica_cluster_size(job), tensor_groups_are_symmetric(job)};
}

bool replicas_are_symmetric(const Job& job, std::string* why_not) {
  return replica_cluster_size(job, why_not) > 0;
}

}  // namespace partune::sim
