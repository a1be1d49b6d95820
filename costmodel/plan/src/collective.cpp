#include "partune/costmodel/collective.hpp"

#include <algorithm>
#include <cmath>

namespace partune {

const char* to_string(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::send_recv: return "send_recv";
    case CollectiveKind::all_to_all: return "all_to_all";
  }
  return "?";
}

double group_intra_bw(const InstanceType& inst) {
  return inst.intra_node.bw * inst.intra_node.efficiency;
}

double group_network_bw(const GroupSpan& span, const InstanceType& inst, double oversubscription) {
  const double share = static_cast<double>(std::min(span.per_node, inst.gpus_per_node)) /
                       inst.gpus_per_node;
  return inst.node_net_bw() * share / std::max(1.0, oversubscription);
}

const CollectiveProfile& collective_profile(const InstanceType& inst, CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::tree: return inst.tree;
    case CollectiveAlgorithm::all_to_all: return inst.all_to_all;
    case CollectiveAlgorithm::nccl: break;  // the resolved algorithm's (resolved_algorithm)
    default: return inst.ring;
  }
}

namespace {

// Every algorithm below fills `p` with the phases of one member of a group of n = g x k
// (g members on each of k nodes) for a collective of S bytes.

// Multi-channel rings: the ring visits the node's members over NVSwitch and crosses each
// node boundary once per channel; with g channels every member feeds its node successor
// and, through its own NIC, a 1/g share of the node's boundary traffic. The data stream
// through the ring in chunks, so a piece of it waits on the hops it travels: n - 1 of them
// (twice for an all-reduce), of which k - 1 cross the network and the rest NVSwitch, as
// NCCL's own model counts them (src/graph/tuning.cc: nInterSteps = nNodes - 1 for
// all-gather and reduce-scatter, 2 (nNodes - 1) for all-reduce, the other steps at the
// intra-node latency).
void ring(CollectiveKind kind, double S, const GroupSpan& span, const InstanceType& inst, CollectivePhases& p) {
  const double n = span.size, g = span.per_node, k = span.nodes;
  const double halves = kind == CollectiveKind::all_reduce ? 2.0 : 1.0;  // reduce-scatter + all-gather
  const double f = halves * (n - 1) / n;
  const double hops = halves * ((n - k) * inst.intra_node.latency + (k - 1) * inst.nic.latency);
  p.add(f * S, k > 1 ? f * S / g : 0.0, hops);
}

// NCCL's double binary tree (all-reduce across nodes): a chain inside each node, two
// trees between nodes; each node sends and receives the buffer once per direction, the
// node's members each carrying 1/g of it, with log2(k) network hops up and down.
void tree(const GroupSpan& span, double S, const InstanceType& inst, CollectivePhases& p) {
  const double g = span.per_node, k = span.nodes;
  p.add(S, S / g, 2.0 * (std::ceil(std::log2(k)) * inst.nic.latency + (g - 1) * inst.intra_node.latency));
}

// Two levels: a ring reduce-scatter inside the node, a ring exchange of the node's shards
// between nodes (each member carries its (k-1)/k share), a ring all-gather inside the
// node; all-gather and reduce-scatter run one intra-node half and the network exchange.
void hierarchical(CollectiveKind kind, double S, const GroupSpan& span, const InstanceType& inst,
                  CollectivePhases& p) {
  const double g = span.per_node, k = span.nodes;
  const bool ar = kind == CollectiveKind::all_reduce;
  const double halves = ar ? 2.0 : 1.0;
  const double intra = (g - 1) / g * S;
  p.add(intra, 0, (g - 1) * inst.intra_node.latency);
  p.add(0, halves * (k - 1) / k * S / g, halves * (k - 1) * inst.nic.latency);
  if (ar) p.add(intra, 0, (g - 1) * inst.intra_node.latency);
}

// SMDDP-style: each node exchanges its S/k with every other node directly (one round,
// all peers at once) while the node's members exchange over NVSwitch; the two pipeline,
// so they share a phase. All-reduce is a reduce-scatter round then an all-gather round.
void all_to_all(CollectiveKind kind, double S, const GroupSpan& span, const InstanceType& inst,
                CollectivePhases& p) {
  const double g = span.per_node, k = span.nodes;
  const int rounds = kind == CollectiveKind::all_reduce ? 2 : 1;
  for (int r = 0; r < rounds; ++r) {
    if (k > 1) p.add((g - 1) / g * S, (k - 1) / k * S / g, inst.nic.latency + inst.intra_node.latency);
    else p.add((g - 1) / g * S, 0, inst.intra_node.latency);
  }
}

// A pipeline hop: the message over NVSwitch, or through the sender's NIC share.
void send_recv(double S, const GroupSpan& span, const InstanceType& inst, CollectivePhases& p) {
  if (span.nodes <= 1) p.add(S, 0, inst.intra_node.latency);
  else p.add(0, S, inst.nic.latency);
}

// The token exchange of a mixture of experts (NCCL's grouped send/receive pairs): every
// member sends S/n to each other member at once, (g - 1) of them over NVSwitch and the
// other n - g through its NIC; one hop.
void exchange(double S, const GroupSpan& span, const InstanceType& inst, CollectivePhases& p) {
  const double n = span.size, g = span.per_node;
  p.add((g - 1) / n * S, (n - g) / n * S, span.nodes > 1 ? inst.nic.latency : inst.intra_node.latency);
}

}  // namespace

CollectivePhases collective_phases(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                   const GroupSpan& span, const InstanceType& inst) {
  CollectivePhases p;
  if (span.size <= 1 || bytes <= 0) return p;
  if (kind == CollectiveKind::send_recv) {
    send_recv(bytes, span, inst, p);
    return p;
  }
  if (kind == CollectiveKind::all_to_all) {  // the same pattern whatever the algorithm
    p.net_efficiency = inst.ring.net_efficiency;
    p.intra_efficiency = inst.ring.intra_efficiency;
    p.launch_latency = inst.ring.launch_latency;
    exchange(bytes, span, inst, p);
    return p;
  }
  algo = resolved_algorithm(kind, algo, bytes, span, inst);
  if (algo == CollectiveAlgorithm::tree && (kind != CollectiveKind::all_reduce || span.nodes <= 1))
    algo = CollectiveAlgorithm::ring;
  const CollectiveProfile& profile = collective_profile(inst, algo);
  p.net_efficiency = profile.net_efficiency;
  p.intra_efficiency = profile.intra_efficiency;
  p.launch_latency = profile.launch_latency;
  // A stack without reduce-scatter moves an all-reduce's bytes (and keeps its part).
  if (kind == CollectiveKind::reduce_scatter && profile.reduce_scatter_as_all_reduce) kind = CollectiveKind::all_reduce;
  switch (algo) {
    case CollectiveAlgorithm::ring: ring(kind, bytes, span, inst, p); break;
    case CollectiveAlgorithm::tree: tree(span, bytes, inst, p); break;
    case CollectiveAlgorithm::hierarchical: hierarchical(kind, bytes, span, inst, p); break;
    case CollectiveAlgorithm::all_to_all: all_to_all(kind, bytes, span, inst, p); break;
    case CollectiveAlgorithm::nccl: break;  // resolved above
  }
  return p;
}

CollectiveAlgorithm resolved_algorithm(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                       const GroupSpan& span, const InstanceType& inst) {
  if (algo != CollectiveAlgorithm::nccl) return algo;
  if (kind != CollectiveKind::all_reduce || span.nodes <= 1) return CollectiveAlgorithm::ring;
  const double ring = collective_cost(kind, CollectiveAlgorithm::ring, bytes, span, inst).total();
  const double tree = collective_cost(kind, CollectiveAlgorithm::tree, bytes, span, inst).total();
  return tree < ring ? CollectiveAlgorithm::tree : CollectiveAlgorithm::ring;
}

CollectiveCost collective_cost(CollectiveKind kind, CollectiveAlgorithm algo, double bytes, const GroupSpan& span,
                               const InstanceType& inst, double oversubscription) {
  const CollectivePhases p = collective_phases(kind, algo, bytes, span, inst);
  // A member's links when the whole node communicates: its own NVSwitch port, and its
  // share of the node's NICs (and of the uplink, when the fabric is over-subscribed).
  const double intra_bw = group_intra_bw(inst) * p.intra_efficiency;
  // A member alone among the GPUs on its NIC with this collective has the NIC's share
  // of them all.
  const double alone = span.nic_sharers > 0 ? static_cast<double>(inst.gpus_per_nic()) / span.nic_sharers : 1.0;
  const double net_bw =
      inst.node_net_bw() / inst.gpus_per_node * alone / std::max(1.0, oversubscription) * p.net_efficiency;
  CollectiveCost c;
  for (int i = 0; i < p.phase_count; ++i) {
    const CollectivePhase& ph = p.phases[i];
    c.bandwidth_time += std::max(ph.intra_bytes / intra_bw, ph.net_bytes / net_bw);
    c.latency_time += ph.latency;
  }
  if (p.phase_count > 0) c.latency_time += p.launch_latency;
  return c;
}

CollectiveTraffic collective_traffic(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                     const GroupSpan& span, const InstanceType& inst) {
  const CollectivePhases p = collective_phases(kind, algo, bytes, span, inst);
  CollectiveTraffic t;
  for (int i = 0; i < p.phase_count; ++i) {
    const CollectivePhase& ph = p.phases[i];
    t.phases[i] = {ph.intra_bytes / p.intra_efficiency, ph.net_bytes / p.net_efficiency, ph.latency};
    t.latency += ph.latency;
  }
  t.phase_count = p.phase_count;
  if (p.phase_count > 0) t.latency += p.launch_latency;
  return t;
}

}  // namespace partune
