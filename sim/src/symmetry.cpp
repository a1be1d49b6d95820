// Which ranks one simulated rank may stand for (architecture.md §5.8): blocks of
// data-parallel replicas that own their nodes, and one rank per tensor-parallel group.
#include "partune/sim/simulator.hpp"

#include <algorithm>
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
  if (sdp > 1 && size % sdp != 0) return no("sharded groups would span simulated and mirrored replicas");
  const int ep = job.model.is_moe() ? job.parallel.expert_parallel_degree : 1;
  if (ep > 1 && size % ep != 0) return no("expert groups would span simulated and mirrored replicas");
  const int cp = job.parallel.context_parallel_degree;
  if (cp > 1 && size % cp != 0) return no("context groups would span simulated and mirrored replicas");
  // Exactness: a data-parallel group's members inside the block sit on one node, so every
  // network successor lies outside it and its mirror loads the same links.
  for (int r = 0; r < world; ++r) {
    if (p.coords(r).data >= size) continue;
    const std::vector<int> group = p.group(r, Axis::data);
    for (int d = 1; d < size; ++d)
      if (group[d] / G != group[0] / G) return no("a data-parallel group spans nodes inside the replica block");
  }
  return size;
}

bool replicas_are_symmetric(const Job& job, std::string* why_not) {
  return replica_cluster_size(job, why_not) > 0;
}

}  // namespace partune::sim
