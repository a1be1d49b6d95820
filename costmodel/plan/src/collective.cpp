#include "partune/costmodel/collective.hpp"

#include <algorithm>
#include <cmath>

#include "partune/costmodel/nccl_tuner.hpp"

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
    default: return inst.ring;  // ring, hierarchical, NVLS, and nccl: NCCL's kernels as the rings
  }
}

namespace {

// Every algorithm below fills `p` with the phases of one member of a group of n = g x k
// (g members on each of k nodes) for a collective of S bytes, and the hops each phase
// waits on (their latencies are set after: set_link_latencies or apply_nccl_protocol).

// Multi-channel rings: the ring visits the node's members over NVSwitch and crosses each
// node boundary once per channel; with g channels every member feeds its node successor
// and, through its own NIC, a 1/g share of the node's boundary traffic. The data stream
// through the ring in chunks, so a piece of it waits on the hops it travels: n - 1 of them
// (twice for an all-reduce), of which k - 1 cross the network and the rest NVSwitch, as
// NCCL's own model counts them (src/graph/tuning.cc: nInterSteps = nNodes - 1 for
// all-gather and reduce-scatter, 2 (nNodes - 1) for all-reduce, the other steps at the
// intra-node latency).
double ring_halves(CollectiveKind kind) { return kind == CollectiveKind::all_reduce ? 2.0 : 1.0; }

void ring(CollectiveKind kind, double S, const GroupSpan& span, CollectivePhases& p) {
  const double n = span.size, g = span.per_node, k = span.nodes;
  const double halves = ring_halves(kind);  // reduce-scatter + all-gather
  const double f = halves * (n - 1) / n;
  p.add(f * S, k > 1 ? f * S / g : 0.0, halves * (n - k), halves * (k - 1));
}

// NCCL's double binary tree (all-reduce across nodes): a chain inside each node, two
// trees between nodes; each node sends and receives the buffer once per direction, the
// node's members each carrying 1/g of it, with log2(k) network hops up and down.
void tree(const GroupSpan& span, double S, CollectivePhases& p) {
  const double g = span.per_node, k = span.nodes;
  p.add(S, S / g, 2.0 * (g - 1), 2.0 * std::ceil(std::log2(k)));
}

// NVLink SHARP all-reduce: every member pushes its buffer into the switch, which reduces
// and multicasts the result back; the measured rate (collectives.nccl.nvls_efficiency) is
// set on the phase by collective_phases. One step.
void nvls(double S, CollectivePhases& p) { p.add(S, 0, 1, 0); }

// Two levels: a ring reduce-scatter inside the node, a ring exchange of the node's shards
// between nodes (each member carries its (k-1)/k share), a ring all-gather inside the
// node; all-gather and reduce-scatter run one intra-node half and the network exchange.
void hierarchical(CollectiveKind kind, double S, const GroupSpan& span, CollectivePhases& p) {
  const double g = span.per_node, k = span.nodes;
  const bool ar = kind == CollectiveKind::all_reduce;
  const double halves = ar ? 2.0 : 1.0;
  const double intra = (g - 1) / g * S;
  p.add(intra, 0, g - 1, 0);
  p.add(0, halves * (k - 1) / k * S / g, 0, halves * (k - 1));
  if (ar) p.add(intra, 0, g - 1, 0);
}

// SMDDP-style: each node exchanges its S/k with every other node directly (one round,
// all peers at once) while the node's members exchange over NVSwitch; the two pipeline,
// so they share a phase. All-reduce is a reduce-scatter round then an all-gather round.
void all_to_all(CollectiveKind kind, double S, const GroupSpan& span, CollectivePhases& p) {
  const double g = span.per_node, k = span.nodes;
  const int rounds = kind == CollectiveKind::all_reduce ? 2 : 1;
  for (int r = 0; r < rounds; ++r) {
    if (k > 1) p.add((g - 1) / g * S, (k - 1) / k * S / g, 1, 1);
    else p.add((g - 1) / g * S, 0, 1, 0);
  }
}

// A pipeline hop: the message over NVSwitch, or through the sender's NIC share.
void send_recv(double S, const GroupSpan& span, CollectivePhases& p) {
  if (span.nodes <= 1) p.add(S, 0, 1, 0);
  else p.add(0, S, 0, 1);
}

// The token exchange of a mixture of experts (NCCL's grouped send/receive pairs): every
// member sends S/n to each other member at once, (g - 1) of them over NVSwitch and the
// other n - g through its NIC; one hop.
void exchange(double S, const GroupSpan& span, CollectivePhases& p) {
  const double n = span.size, g = span.per_node;
  if (span.nodes > 1) p.add((g - 1) / n * S, (n - g) / n * S, 0, 1);
  else p.add((g - 1) / n * S, 0, 1, 0);
}

// NCCL's send/receive (a pipeline hop, an exchange's pairs) on an instance with its tables: inside a node one LL step
// (NCCL_P2P_LL_THRESHOLD, 16 KiB, MB26 §2.1: the small pairs), across nodes a Simple
// rendezvous (the receiver's buffer offered, then the data: two network steps) after
// NCCL's base latency. MB §4.2 (MSCCLPP, NDmv4): 8 GPUs' 1 KB all-to-all 9.3 us, 2 x 8's
// 49.7 us.
void set_nccl_p2p_latencies(CollectivePhases& p, const InstanceType& inst) {
  const auto ll = nccl_protocol_model(inst.nccl.arch, NcclAlgorithm::ring, NcclProtocol::ll, 1, 2, 1);
  const auto simple = nccl_protocol_model(inst.nccl.arch, NcclAlgorithm::ring, NcclProtocol::simple, 2, 2, 1);
  for (int i = 0; i < p.phase_count; ++i) {
    CollectivePhase& ph = p.phases[i];
    if (ph.net_hops > 0) ph.latency = simple->base_latency + 2.0 * ph.net_hops * (simple->net_hop + inst.nic.latency);
    else ph.latency = ll->base_latency + ph.intra_hops * (ll->intra_hop + inst.intra_node.latency);
  }
}

// Each hop at its link's latency (no NCCL tables, or not an NCCL pattern).
void set_link_latencies(CollectivePhases& p, const InstanceType& inst) {
  for (int i = 0; i < p.phase_count; ++i)
    p.phases[i].latency = p.phases[i].intra_hops * inst.intra_node.latency + p.phases[i].net_hops * inst.nic.latency;
}

// The phases on idle links: per phase the slower of the member's NVSwitch port and its NIC
// share for that phase's bytes, plus the latencies.
CollectiveCost idle_links_cost(const CollectivePhases& p, const GroupSpan& span, const InstanceType& inst,
                               double oversubscription) {
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

// `p` (the algorithm's phases at its Simple rate, whose bandwidth time on idle links is
// `simple_seconds`) run with NCCL protocol `protocol` (nccl_tuner.hpp): its step latencies
// set, its rates scaled and capped (the cap on NCCL's bus bandwidth becomes a lower rate on
// every link). Returns the call's time on idle links, or a negative number where NCCL does
// not run the pair. (Both links' rates scale alike, so the bandwidth time is simple_seconds
// over the factor: no second pass over the phases.)
double apply_nccl_protocol(CollectivePhases& p, double simple_seconds, NcclAlgorithm algo, NcclProtocol protocol,
                           double halves, double bytes, const GroupSpan& span, const InstanceType& inst) {
  const auto m = nccl_protocol_model(inst.nccl.arch, algo, protocol, span.nodes, span.per_node,
                                     span.nodes > 1 ? inst.nccl.net_channels : inst.nccl.channels);
  if (!m) return -1;
  p.protocol = protocol;
  double scale = m->bandwidth_factor, seconds = simple_seconds / m->bandwidth_factor;
  if (m->bus_bw_cap > 0) {
    const double t_cap = nccl_bus_bytes(algo, halves, span.size, bytes) / m->bus_bw_cap;
    if (seconds > 0 && seconds < t_cap) scale *= seconds / t_cap, seconds = t_cap;
  }
  p.intra_efficiency *= scale;
  p.net_efficiency *= scale;
  double latency = m->base_latency + p.launch_latency;
  for (int i = 0; i < p.phase_count; ++i) {
    CollectivePhase& ph = p.phases[i];
    ph.latency = ph.intra_hops * (m->intra_hop + inst.intra_node.latency) + ph.net_hops * (m->net_hop + inst.nic.latency);
    latency += ph.latency;
  }
  p.phases[0].latency += m->base_latency;
  return seconds + latency;
}

// NCCL's protocol choice over `base`: the job's NCCL_PROTO, or the fastest on idle links.
CollectivePhases with_nccl_protocol(const CollectivePhases& base, NcclAlgorithm algo, double halves, double bytes,
                                    const GroupSpan& span, const InstanceType& inst) {
  const double simple_seconds = idle_links_cost(base, span, inst, 1.0).bandwidth_time;
  CollectivePhases best, q;
  double best_time = -1;
  for (NcclProtocol proto : {NcclProtocol::simple, NcclProtocol::ll128, NcclProtocol::ll}) {
    if (inst.nccl.protocol != NcclProtocol::automatic && inst.nccl.protocol != proto) continue;
    q = base;
    const double t = apply_nccl_protocol(q, simple_seconds, algo, proto, halves, bytes, span, inst);
    if (t >= 0 && (best_time < 0 || t < best_time)) best = q, best_time = t;
  }
  if (best_time >= 0) return best;
  // The job's protocol does not run this algorithm (NVLS is Simple only): NCCL runs Simple.
  q = base;
  apply_nccl_protocol(q, simple_seconds, algo, NcclProtocol::simple, halves, bytes, span, inst);
  return q;
}

bool nvls_runs(CollectiveKind kind, const GroupSpan& span, const InstanceType& inst) {
  return kind == CollectiveKind::all_reduce && span.nodes <= 1 && inst.nccl.nvls_efficiency > 0 &&
         inst.nccl.arch != NcclArch::none;
}

// The NCCL algorithm a resolved CollectiveAlgorithm runs as (ring for the others).
NcclAlgorithm nccl_algorithm(CollectiveAlgorithm algo) {
  return algo == CollectiveAlgorithm::tree ? NcclAlgorithm::tree
         : algo == CollectiveAlgorithm::nvls ? NcclAlgorithm::nvls
                                             : NcclAlgorithm::ring;
}

}  // namespace

CollectivePhases collective_phases(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                   const GroupSpan& span, const InstanceType& inst) {
  CollectivePhases p;
  if (span.size <= 1 || bytes <= 0) return p;
  if (kind == CollectiveKind::send_recv) {
    send_recv(bytes, span, p);
    if (inst.nccl.arch == NcclArch::none) set_link_latencies(p, inst);
    else set_nccl_p2p_latencies(p, inst);
    return p;
  }
  if (kind == CollectiveKind::all_to_all) {  // the same pattern whatever the algorithm
    p.net_efficiency = inst.ring.net_efficiency;
    p.intra_efficiency = inst.ring.intra_efficiency;
    p.launch_latency = inst.ring.launch_latency;
    exchange(bytes, span, p);
    if (inst.nccl.arch == NcclArch::none) set_link_latencies(p, inst);
    else set_nccl_p2p_latencies(p, inst);
    return p;
  }
  algo = resolved_algorithm(kind, algo, bytes, span, inst);
  if (algo == CollectiveAlgorithm::tree && (kind != CollectiveKind::all_reduce || span.nodes <= 1))
    algo = CollectiveAlgorithm::ring;
  if (algo == CollectiveAlgorithm::nvls && !nvls_runs(kind, span, inst)) algo = CollectiveAlgorithm::ring;
  const CollectiveProfile& profile = collective_profile(inst, algo);
  p.net_efficiency = profile.net_efficiency;
  p.intra_efficiency = profile.intra_efficiency;
  p.launch_latency = profile.launch_latency;
  // A stack without reduce-scatter moves an all-reduce's bytes (and keeps its part).
  if (kind == CollectiveKind::reduce_scatter && profile.reduce_scatter_as_all_reduce) kind = CollectiveKind::all_reduce;
  switch (algo) {
    case CollectiveAlgorithm::ring: ring(kind, bytes, span, p); break;
    case CollectiveAlgorithm::tree: tree(span, bytes, p); break;
    case CollectiveAlgorithm::nvls:
      nvls(bytes, p);
      p.intra_efficiency = inst.nccl.nvls_efficiency / inst.intra_node.efficiency;
      break;
    case CollectiveAlgorithm::hierarchical: hierarchical(kind, bytes, span, p); break;
    case CollectiveAlgorithm::all_to_all: all_to_all(kind, bytes, span, p); break;
    case CollectiveAlgorithm::nccl: break;  // resolved above
  }
  const bool nccl_pattern = algo == CollectiveAlgorithm::ring || algo == CollectiveAlgorithm::tree ||
                            algo == CollectiveAlgorithm::nvls;
  if (inst.nccl.arch == NcclArch::none || !nccl_pattern) {
    set_link_latencies(p, inst);
    return p;
  }
  return with_nccl_protocol(p, nccl_algorithm(algo), ring_halves(kind), bytes, span, inst);
}

CollectiveAlgorithm resolved_algorithm(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                       const GroupSpan& span, const InstanceType& inst) {
  if (algo != CollectiveAlgorithm::nccl) return algo;
  if (kind != CollectiveKind::all_reduce) return CollectiveAlgorithm::ring;
  CollectiveAlgorithm best = CollectiveAlgorithm::ring;
  double best_time = collective_cost(kind, CollectiveAlgorithm::ring, bytes, span, inst).total();
  for (CollectiveAlgorithm other : {CollectiveAlgorithm::tree, CollectiveAlgorithm::nvls}) {
    if (other == CollectiveAlgorithm::tree && span.nodes <= 1) continue;
    if (other == CollectiveAlgorithm::nvls && !nvls_runs(kind, span, inst)) continue;
    const double t = collective_cost(kind, other, bytes, span, inst).total();
    if (t < best_time) best = other, best_time = t;
  }
  return best;
}

CollectiveCost collective_cost(CollectiveKind kind, CollectiveAlgorithm algo, double bytes, const GroupSpan& span,
                               const InstanceType& inst, double oversubscription) {
  return idle_links_cost(collective_phases(kind, algo, bytes, span, inst), span, inst, oversubscription);
}

CollectiveTraffic collective_traffic(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                     const GroupSpan& span, const InstanceType& inst) {
  return phases_traffic(collective_phases(kind, algo, bytes, span, inst));
}

CollectivePhases node_aware_exchange_phases(double bytes, double copies, double remote_nodes, const GroupSpan& span,
                                            const InstanceType& inst) {
  if (span.nodes <= 1 || copies <= 0) return collective_phases(CollectiveKind::all_to_all, CollectiveAlgorithm::ring,
                                                               bytes, span, inst);
  CollectivePhases p;
  if (span.size <= 1 || bytes <= 0) return p;
  p.net_efficiency = inst.ring.net_efficiency;
  p.intra_efficiency = inst.ring.intra_efficiency;
  p.launch_latency = inst.ring.launch_latency;
  const double g = span.per_node;
  p.add((g - 1) / g * bytes, bytes * remote_nodes / copies, 0, 1);
  if (inst.nccl.arch == NcclArch::none) set_link_latencies(p, inst);
  else set_nccl_p2p_latencies(p, inst);
  return p;
}

CollectiveCost phases_cost(const CollectivePhases& p, const GroupSpan& span, const InstanceType& inst,
                           double oversubscription) {
  return idle_links_cost(p, span, inst, oversubscription);
}

CollectiveTraffic phases_traffic(const CollectivePhases& p) {
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
