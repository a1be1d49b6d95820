#pragma once
// Private to sim/: the SimGrid platform of a cluster. One host per simulated GPU (and
// one per node for host memory); per GPU a full-duplex NVSwitch port; per node its
// network ports (network_port_of: a NIC shared by gpus_per_nic GPUs, as on p4d's 4 NICs
// for 8 GPUs, or a GPU's own NICs together, as p5's 4 a GPU), its PCIe switches to host
// memory and, when the fabric is over-subscribed, an uplink. Routes are declared only
// between hosts that talk, so large clusters stay cheap.
#include <simgrid/s4u.hpp>

#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune::sim {

// A node's network as the simulator lays it out: min(nics_per_node, gpus_per_node) ports,
// each carrying an equal share of the node's NICs, so the node moves node_net_bw() and a
// GPU reaches its share of it. With fewer NICs than GPUs a port is one NIC that
// gpus_per_nic GPUs share (p4d: 2, p3dn: 8); with more NICs than GPUs a port is one
// GPU's NICs together (p5: 4 x 100 Gbps), as NCCL spreads a GPU's traffic over the NICs
// behind its PCIe switch.
int network_ports(const InstanceType& inst);
double network_port_bw(const InstanceType& inst);  // bytes/s, NIC efficiency applied
int network_port_of(const InstanceType& inst, int local_gpu);  // 0 .. network_ports - 1

class Platform {
 public:
  Platform(const Job& job, const std::vector<int>& simulated_ranks, bool mirrors);
  simgrid::s4u::Host* gpu(int rank) const;
  simgrid::s4u::Host* cpu(int node) const;
  // The rank whose GPU `host` is; -1 for a mirror, a host-memory host or null.
  int rank_of(const simgrid::s4u::Host* host) const;
  // Where the rank's compute runs: its own device, or with ranks_share_host_compute() the
  // node's one host of host.cores cores, shared by the node's ranks.
  simgrid::s4u::Host* compute_host(int rank) const;

  // Successors of `rank` inside `members` (its communicator): the next member on its
  // NVLink level (node or NVLink domain), and the member at its local position on the
  // next one of the group. With
  // mirrors, a member whose successor is not simulated sends to its own mirror instead
  // (through its NIC, or through its NVSwitch port for a successor on its node), which
  // by symmetry loads the links as the real peer would.
  void connect_group(int rank, const std::vector<int>& members, GroupSpan& span,
                     simgrid::s4u::Host*& intra_successor, simgrid::s4u::Host*& net_successor,
                     int& simulated_members);
  void connect_pair(int from, int to);
  void seal();
  // The NVLink level (node, or NVLink domain) whose NVSwitch the rank's port reaches.
  int nvlink_domain(int rank) const { return domain_of(rank); }

 private:
  void route(int from_rank, int to_rank);
  // The network links from a GPU to the fabric (its NIC, the node's uplink) and back.
  std::vector<simgrid::s4u::LinkInRoute> network_up(int rank) const;
  std::vector<simgrid::s4u::LinkInRoute> network_down(int rank) const;
  static int zone_gpus(const InstanceType& inst, int world);
  simgrid::s4u::NetZone* zone_of(int rank);  // created on first use
  simgrid::kernel::routing::NetPoint* gateway_of(int rank);
  int node_of(int rank) const { return rank / gpus_per_node_; }
  // The NVLink level the rank's NVSwitch port reaches: its node, or its NVLink domain
  // (InstanceType::fabric_gpus consecutive ranks).
  int domain_of(int rank) const { return rank / fabric_gpus_; }
  int nic_of(int rank) const;

  const Job& job_;
  int gpus_per_node_, fabric_gpus_;
  bool mirrors_;
  // Routing: a star of zones, each a full routing table over about 64 GPUs (whole
  // NVLink domains) and their hosts; one full table for the whole cluster grows as the
  // square of its hosts (2.7 GB at 16,384 GPUs).
  int zone_gpus_ = 0;
  simgrid::s4u::NetZone* root_ = nullptr;
  std::vector<simgrid::s4u::NetZone*> zones_;
  std::vector<simgrid::kernel::routing::NetPoint*> gateways_;
  std::set<int> to_gateway_, from_gateway_;  // GPUs routed to and from their zone's gateway
  std::vector<simgrid::s4u::Host*> gpu_, mirror_, intra_mirror_, cpu_;
  std::vector<simgrid::s4u::Host*> cores_;  // per node, when ranks share the host's cores
  std::vector<simgrid::s4u::Link*> nvswitch_port_, nic_, pcie_, uplink_;
  std::vector<bool> simulated_;
  std::set<std::pair<int, int>> routed_;
  std::unordered_map<const simgrid::s4u::Host*, int> rank_of_gpu_;
};

}  // namespace partune::sim
