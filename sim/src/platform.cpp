#include "platform.hpp"

#include "world.hpp"  // kHostSpeed

#include <algorithm>
#include <string>

namespace partune::sim {

namespace s4u = simgrid::s4u;
using Dir = s4u::LinkInRoute::Direction;

namespace {
// Encodes the mirror endpoints in the routed-pair set.
constexpr int kMirrorBase = 1 << 29;
constexpr int kIntraMirrorBase = 1 << 30;
}  // namespace

int network_ports(const InstanceType& inst) { return std::max(1, std::min(inst.nics_per_node, inst.gpus_per_node)); }

double network_port_bw(const InstanceType& inst) {
  const double nics_per_port = static_cast<double>(inst.nics_per_node) / network_ports(inst);
  return inst.nic.bw * inst.nic.efficiency * nics_per_port;
}

int network_port_of(const InstanceType& inst, int local_gpu) {
  return std::min(network_ports(inst) - 1, local_gpu / inst.gpus_per_nic());
}

Platform::Platform(const Job& job, const std::vector<int>& simulated_ranks, bool mirrors)
    : job_(job),
      gpus_per_node_(job.cluster.instance.gpus_per_node),
      fabric_gpus_(job.cluster.instance.fabric_gpus()),
      mirrors_(mirrors) {
  const InstanceType& inst = job.cluster.instance;
  const int world = job.world_size(), nodes = job.cluster.nodes;
  zone_gpus_ = zone_gpus(inst, world);
  root_ = s4u::create_star_zone("cluster");
  zones_.assign(static_cast<std::size_t>((world + zone_gpus_ - 1) / zone_gpus_), nullptr);
  gateways_.assign(zones_.size(), nullptr);
  gpu_.assign(world, nullptr);
  mirror_.assign(world, nullptr);
  intra_mirror_.assign(world, nullptr);
  simulated_.assign(world, false);
  cpu_.assign(nodes, nullptr);
  cores_.assign(nodes, nullptr);
  nvswitch_port_.assign(world, nullptr);
  const int ports = network_ports(inst);
  nic_.assign(static_cast<std::size_t>(nodes) * ports, nullptr);
  const int switches = std::max(1, gpus_per_node_ / inst.gpus_per_pcie_switch);
  pcie_.assign(static_cast<std::size_t>(nodes) * switches, nullptr);
  uplink_.assign(nodes, nullptr);

  std::vector<bool> node_used(nodes, false);
  for (int r : simulated_ranks) {
    simulated_[r] = true;
    node_used[node_of(r)] = true;
    const std::string id = std::to_string(r);
    s4u::NetZone* zone = zone_of(r);
    gpu_[r] = zone->create_host("gpu" + id, kHostSpeed);
    rank_of_gpu_[gpu_[r]] = r;
    if (mirrors_) {
      mirror_[r] = zone->create_host("mirror" + id, kHostSpeed);
      intra_mirror_[r] = zone->create_host("imirror" + id, kHostSpeed);
    }
    nvswitch_port_[r] = zone->create_split_duplex_link("nvswitch" + id, group_intra_bw(inst));
  }
  for (int n = 0; n < nodes; ++n) {
    if (!node_used[n]) continue;
    const std::string id = std::to_string(n);
    s4u::NetZone* zone = zone_of(n * gpus_per_node_);
    cpu_[n] = zone->create_host("host" + id, kHostSpeed);
    if (inst.ranks_share_host_compute()) {
      // The node's cores as one pool: a rank's kernels run at most at one core's speed
      // alone (each execution is bounded to kHostSpeed, world.cpp), and all cores busy
      // deliver cores x all_busy_speed of it together, split fairly. One rank per core
      // with all_busy_speed 1 is a core each; more ranks than cores share them.
      cores_[n] = zone->create_host("cores" + id, kHostSpeed * inst.host_cores * inst.host_all_busy_speed);
    }
    for (int j = 0; j < ports; ++j)
      nic_[n * ports + j] = zone->create_split_duplex_link("nic" + id + "." + std::to_string(j), network_port_bw(inst));
    for (int s = 0; s < switches; ++s)
      pcie_[n * switches + s] = zone->create_split_duplex_link("pcie" + id + "." + std::to_string(s), inst.pcie_bw);
    if (job.cluster.oversubscription > 1.0)
      uplink_[n] = zone->create_split_duplex_link("uplink" + id, inst.node_net_bw() / job.cluster.oversubscription);
  }
  for (auto* l : nvswitch_port_) if (l) l->seal();
  for (auto* l : nic_) if (l) l->seal();
  for (auto* l : pcie_) if (l) l->seal();
  for (auto* l : uplink_) if (l) l->seal();
  // Host memory over the GPU's PCIe switch: down to the host (offload), up (reload).
  for (int r : simulated_ranks) {
    const int n = node_of(r), s = (r % gpus_per_node_) / job.cluster.instance.gpus_per_pcie_switch;
    s4u::Link* link = pcie_[n * switches + std::min(s, switches - 1)];
    s4u::NetZone* zone = zone_of(r);
    zone->add_route(gpu_[r]->get_netpoint(), cpu_[n]->get_netpoint(), nullptr, nullptr,
                    {s4u::LinkInRoute(link, Dir::UP)}, false);
    zone->add_route(cpu_[n]->get_netpoint(), gpu_[r]->get_netpoint(), nullptr, nullptr,
                    {s4u::LinkInRoute(link, Dir::DOWN)}, false);
  }
}

s4u::Host* Platform::gpu(int rank) const { return gpu_[rank]; }
s4u::Host* Platform::cpu(int node) const { return cpu_[node]; }
int Platform::rank_of(const s4u::Host* host) const {
  const auto it = rank_of_gpu_.find(host);
  return it == rank_of_gpu_.end() ? -1 : it->second;
}
s4u::Host* Platform::compute_host(int rank) const {
  s4u::Host* shared = cores_[node_of(rank)];
  return shared ? shared : gpu_[rank];
}

int Platform::nic_of(int rank) const {
  const InstanceType& inst = job_.cluster.instance;
  return node_of(rank) * network_ports(inst) + network_port_of(inst, rank % gpus_per_node_);
}

void Platform::route(int from, int to) {
  if (!routed_.insert({from, to}).second) return;
  s4u::NetZone* zone = zone_of(from);
  if (to >= kIntraMirrorBase) {
    // Up and back down the sender's own NVSwitch port.
    const int dst = to - kIntraMirrorBase;
    zone->add_route(gpu_[from]->get_netpoint(), intra_mirror_[dst]->get_netpoint(), nullptr, nullptr,
                    {s4u::LinkInRoute(nvswitch_port_[from], Dir::UP), s4u::LinkInRoute(nvswitch_port_[dst], Dir::DOWN)},
                    false);
    return;
  }
  const bool to_mirror = to >= kMirrorBase;
  const int dst = to_mirror ? to - kMirrorBase : to;
  if (!to_mirror && domain_of(from) == domain_of(dst)) {  // NVLink: the node, or its NVLink domain
    zone->add_route(gpu_[from]->get_netpoint(), gpu_[dst]->get_netpoint(), nullptr, nullptr,
                    {s4u::LinkInRoute(nvswitch_port_[from], Dir::UP), s4u::LinkInRoute(nvswitch_port_[dst], Dir::DOWN)},
                    false);
    return;
  }
  // GPUDirect RDMA: GPU -> its NIC -> fabric -> the peer's NIC -> peer GPU. Between zones
  // the halves run to and from the zones' gateways (the root adds no link).
  const std::vector<s4u::LinkInRoute> up = network_up(from), down = network_down(dst);
  s4u::Host* dst_host = to_mirror ? mirror_[dst] : gpu_[dst];
  if (to_mirror || zone_of(dst) == zone) {
    std::vector<s4u::LinkInRoute> links = up;
    links.insert(links.end(), down.begin(), down.end());
    zone->add_route(gpu_[from]->get_netpoint(), dst_host->get_netpoint(), nullptr, nullptr, links, false);
    return;
  }
  if (to_gateway_.insert(from).second)
    zone->add_route(gpu_[from]->get_netpoint(), gateway_of(from), nullptr, nullptr, up, false);
  if (from_gateway_.insert(dst).second)
    zone_of(dst)->add_route(gateway_of(dst), gpu_[dst]->get_netpoint(), nullptr, nullptr, down, false);
}

std::vector<s4u::LinkInRoute> Platform::network_up(int rank) const {
  std::vector<s4u::LinkInRoute> links{s4u::LinkInRoute(nic_[nic_of(rank)], Dir::UP)};
  if (uplink_[node_of(rank)]) links.emplace_back(uplink_[node_of(rank)], Dir::UP);
  return links;
}

std::vector<s4u::LinkInRoute> Platform::network_down(int rank) const {
  std::vector<s4u::LinkInRoute> links;
  if (uplink_[node_of(rank)]) links.emplace_back(uplink_[node_of(rank)], Dir::DOWN);
  links.emplace_back(nic_[nic_of(rank)], Dir::DOWN);
  return links;
}

// GPUs per zone: whole NVLink domains (and nodes), about kZoneGpus of them; a layout
// whose domains are not whole nodes keeps one zone.
int Platform::zone_gpus(const InstanceType& inst, int world) {
  constexpr int kZoneGpus = 64;
  const int domain = inst.fabric_gpus();
  if (domain % inst.gpus_per_node != 0) return world;
  return domain * std::max(1, kZoneGpus / domain);
}

s4u::NetZone* Platform::zone_of(int rank) {
  const int z = rank / zone_gpus_;
  if (!zones_[z]) {
    zones_[z] = s4u::create_full_zone("zone" + std::to_string(z))->set_parent(root_);
    gateways_[z] = zones_[z]->create_router("gateway" + std::to_string(z));
    root_->add_route(zones_[z]->get_netpoint(), nullptr, gateways_[z], nullptr, {}, true);
  }
  return zones_[z];
}

simgrid::kernel::routing::NetPoint* Platform::gateway_of(int rank) {
  zone_of(rank);
  return gateways_[rank / zone_gpus_];
}

void Platform::connect_pair(int from, int to) {
  if (simulated_[from] && simulated_[to]) {
    route(from, to);
    route(to, from);
  }
}

void Platform::connect_group(int rank, const std::vector<int>& members, GroupSpan& span,
                             s4u::Host*& intra_successor, s4u::Host*& net_successor, int& simulated_members) {
  // Group layout: its NVLink levels (nodes, or NVLink domains) in order, and the members
  // on each.
  std::vector<int> nodes;
  for (int m : members)
    if (nodes.empty() || nodes.back() != domain_of(m)) nodes.push_back(domain_of(m));
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  span.size = static_cast<int>(members.size());
  span.nodes = static_cast<int>(nodes.size());
  span.per_node = std::max(1, span.size / span.nodes);
  simulated_members = 0;
  for (int m : members) simulated_members += simulated_[m] ? 1 : 0;

  std::vector<int> local;  // members on rank's NVLink level, in rank order
  for (int m : members)
    if (domain_of(m) == domain_of(rank)) local.push_back(m);
  const int position = static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
  if (local.size() > 1) {
    const int next = local[(position + 1) % local.size()];
    if (simulated_[next]) {
      route(rank, next);
      intra_successor = gpu_[next];
    } else {
      route(rank, kIntraMirrorBase + rank);
      intra_successor = intra_mirror_[rank];
    }
  }
  if (nodes.size() > 1) {
    const int my_node = static_cast<int>(std::find(nodes.begin(), nodes.end(), domain_of(rank)) - nodes.begin());
    const int next_node = nodes[(my_node + 1) % nodes.size()];
    std::vector<int> there;
    for (int m : members)
      if (domain_of(m) == next_node) there.push_back(m);
    const int peer = there[std::min<std::size_t>(position, there.size() - 1)];
    if (simulated_[peer]) {
      route(rank, peer);
      net_successor = gpu_[peer];
    } else {
      route(rank, kMirrorBase + rank);
      net_successor = mirror_[rank];
    }
  }
}

void Platform::seal() { root_->seal(); }

}  // namespace partune::sim
