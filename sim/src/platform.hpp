#pragma once
// Private to sim/: the SimGrid platform of a cluster. One host per simulated GPU (and
// one per node for host memory); per GPU a full-duplex NVSwitch port; per node its NICs
// (each shared by gpus_per_nic GPUs, as on the real machine), its PCIe switches to host
// memory and, when the fabric is over-subscribed, an uplink. Routes are declared only
// between hosts that talk, so large clusters stay cheap.
#include <simgrid/s4u.hpp>

#include <set>
#include <utility>
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune::sim {

class Platform {
 public:
  Platform(const Job& job, const std::vector<int>& simulated_ranks, bool mirrors);
  simgrid::s4u::Host* gpu(int rank) const;
  simgrid::s4u::Host* cpu(int node) const;
  // Where the rank's compute runs: its own device, or with ranks_share_host_compute() the
  // node's one host of host.cores cores, shared by the node's ranks.
  simgrid::s4u::Host* compute_host(int rank) const;

  // Successors of `rank` inside `members` (its communicator): the next member on its
  // node, and the member at its local position on the next node of the group. With
  // mirrors, a member whose successor is not simulated sends to its own mirror instead
  // (through its NIC, or through its NVSwitch port for a successor on its node), which
  // by symmetry loads the links as the real peer would.
  void connect_group(int rank, const std::vector<int>& members, GroupSpan& span,
                     simgrid::s4u::Host*& intra_successor, simgrid::s4u::Host*& net_successor,
                     int& simulated_members);
  void connect_pair(int from, int to);
  void seal();

 private:
  void route(int from_rank, int to_rank);
  int node_of(int rank) const { return rank / gpus_per_node_; }
  int nic_of(int rank) const;

  const Job& job_;
  int gpus_per_node_;
  bool mirrors_;
  simgrid::s4u::NetZone* zone_;
  std::vector<simgrid::s4u::Host*> gpu_, mirror_, intra_mirror_, cpu_;
  std::vector<simgrid::s4u::Host*> cores_;  // per node, when ranks share the host's cores
  std::vector<simgrid::s4u::Link*> nvswitch_port_, nic_, pcie_, uplink_;
  std::vector<bool> simulated_;
  std::set<std::pair<int, int>> routed_;
};

}  // namespace partune::sim
