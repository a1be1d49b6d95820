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

namespace {

CollectiveCost ring(CollectiveKind kind, double S, const GroupSpan& span, const InstanceType& inst,
                    double oversub) {
  const double n = span.size;
  const bool reduce_and_gather = kind == CollectiveKind::all_reduce;
  const double factor = (reduce_and_gather ? 2.0 : 1.0) * (n - 1) / n;
  const double steps = (reduce_and_gather ? 2.0 : 1.0) * (n - 1);
  CollectiveCost c;
  if (span.nodes <= 1) {
    c.bandwidth_time = factor * S / group_intra_bw(inst);
    c.latency_time = steps * inst.intra_node.latency;
  } else {
    // Every ring crosses each node boundary once, so a node's NICs carry what one rank
    // sends; the slowest link of the ring sets the pace and every step waits one
    // network hop.
    const double bw = std::min(group_intra_bw(inst),
                               group_network_bw(span, inst, oversub) * inst.ring.net_efficiency);
    c.bandwidth_time = factor * S / bw;
    c.latency_time = steps * inst.nic.latency;
  }
  return c;
}

CollectiveCost hierarchical(CollectiveKind kind, double S, const GroupSpan& span,
                            const InstanceType& inst, double oversub, double net_efficiency) {
  const double g = span.per_node, k = span.nodes;
  const double intra = group_intra_bw(inst);
  const double net = group_network_bw(span, inst, oversub) * net_efficiency;
  CollectiveCost c;
  // Reduce-scatter inside the node, exchange the node's shards between nodes, gather
  // inside the node; all-reduce does both halves.
  const double halves = kind == CollectiveKind::all_reduce ? 2.0 : 1.0;
  c.bandwidth_time = halves * ((g - 1) / g * S / intra + (k - 1) / k * S / net);
  c.latency_time = halves * ((g - 1) * inst.intra_node.latency + (k - 1) * inst.nic.latency);
  return c;
}

CollectiveCost tree(CollectiveKind kind, double S, const GroupSpan& span, const InstanceType& inst,
                    double oversub) {
  if (kind != CollectiveKind::all_reduce || span.nodes <= 1) return ring(kind, S, span, inst, oversub);
  // NCCL's double binary tree: a chain inside each node, two trees between nodes; each
  // node sends and receives the buffer once per direction.
  const double g = span.per_node, k = span.nodes;
  const double bw = std::min(group_intra_bw(inst),
                             group_network_bw(span, inst, oversub) * inst.tree.net_efficiency);
  CollectiveCost c;
  c.bandwidth_time = S / bw;
  c.latency_time = 2.0 * (std::ceil(std::log2(k)) * inst.nic.latency + (g - 1) * inst.intra_node.latency);
  return c;
}

CollectiveCost all_to_all(CollectiveKind kind, double S, const GroupSpan& span,
                          const InstanceType& inst, double oversub) {
  if (kind == CollectiveKind::all_reduce) {
    CollectiveCost rs = all_to_all(CollectiveKind::reduce_scatter, S, span, inst, oversub);
    CollectiveCost ag = all_to_all(CollectiveKind::all_gather, S, span, inst, oversub);
    return {rs.bandwidth_time + ag.bandwidth_time, rs.latency_time + ag.latency_time};
  }
  // Each node exchanges its S/k with every other node directly (one round, all peers at
  // once), then the node's GPUs exchange over NVSwitch; the two stages pipeline.
  const double g = span.per_node, k = span.nodes;
  const double intra_time = (g - 1) / g * S / group_intra_bw(inst);
  CollectiveCost c;
  if (k <= 1) {
    c.bandwidth_time = intra_time;
    c.latency_time = inst.intra_node.latency;
    return c;
  }
  const double net = group_network_bw(span, inst, oversub) * inst.all_to_all.net_efficiency;
  c.bandwidth_time = std::max(intra_time, (k - 1) / k * S / net);
  c.latency_time = inst.nic.latency + inst.intra_node.latency;
  return c;
}

}  // namespace

const CollectiveProfile& collective_profile(const InstanceType& inst, CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::tree: return inst.tree;
    case CollectiveAlgorithm::all_to_all: return inst.all_to_all;
    default: return inst.ring;
  }
}

namespace {

CollectiveCost collective_links(CollectiveKind kind, CollectiveAlgorithm algo, double bytes, const GroupSpan& span,
                                const InstanceType& inst, double oversubscription) {
  if (kind == CollectiveKind::send_recv) {
    CollectiveCost c;
    if (span.nodes <= 1) {
      c.bandwidth_time = bytes / group_intra_bw(inst);
      c.latency_time = inst.intra_node.latency;
    } else {
      // Every GPU of the node sends at once, each through its own NIC share.
      const double per_gpu = inst.node_net_bw() / inst.gpus_per_node / std::max(1.0, oversubscription);
      c.bandwidth_time = bytes / per_gpu;
      c.latency_time = inst.nic.latency;
    }
    return c;
  }
  switch (algo) {
    case CollectiveAlgorithm::ring: return ring(kind, bytes, span, inst, oversubscription);
    case CollectiveAlgorithm::tree: return tree(kind, bytes, span, inst, oversubscription);
    case CollectiveAlgorithm::hierarchical:
      return hierarchical(kind, bytes, span, inst, oversubscription, inst.ring.net_efficiency);
    case CollectiveAlgorithm::all_to_all: return all_to_all(kind, bytes, span, inst, oversubscription);
  }
  return {};
}

}  // namespace

CollectiveCost collective_cost(CollectiveKind kind, CollectiveAlgorithm algo, double bytes, const GroupSpan& span,
                               const InstanceType& inst, double oversubscription) {
  if (span.size <= 1 || bytes <= 0) return {};
  CollectiveCost c = collective_links(kind, algo, bytes, span, inst, oversubscription);
  if (kind != CollectiveKind::send_recv) c.latency_time += collective_profile(inst, algo).launch_latency;
  return c;
}

CollectiveTraffic collective_traffic(CollectiveKind kind, CollectiveAlgorithm algo, double S,
                                     const GroupSpan& span, const InstanceType& inst) {
  CollectiveTraffic t;
  if (span.size <= 1 || S <= 0 || kind == CollectiveKind::send_recv) return t;
  t.latency = collective_profile(inst, algo).launch_latency;  // the links' latency is added below
  const double n = span.size, g = span.per_node, k = span.nodes;
  const bool ar = kind == CollectiveKind::all_reduce;
  const double ring_eff = inst.ring.net_efficiency;
  if (algo == CollectiveAlgorithm::tree && (!ar || k <= 1)) algo = CollectiveAlgorithm::ring;
  switch (algo) {
    case CollectiveAlgorithm::ring: {
      const double f = (ar ? 2.0 : 1.0) * (n - 1) / n;
      // Multi-channel rings: every member feeds its node successor and, through its own
      // NIC, a 1/g share of the node's boundary traffic.
      t.add(f * S, k > 1 ? f * S / (g * ring_eff) : 0.0);
      t.latency += (ar ? 2.0 : 1.0) * (n - 1) * (k > 1 ? inst.nic.latency : inst.intra_node.latency);
      break;
    }
    case CollectiveAlgorithm::tree:
      t.add(S, S / (g * inst.tree.net_efficiency));
      t.latency += 2.0 * (std::ceil(std::log2(k)) * inst.nic.latency + (g - 1) * inst.intra_node.latency);
      break;
    case CollectiveAlgorithm::hierarchical: {
      const double halves = ar ? 2.0 : 1.0;
      const double intra = (g - 1) / g * S, net = (k - 1) / k * S / (g * ring_eff);
      t.add(intra, 0);
      t.add(0, halves * net);
      if (ar) t.add(intra, 0);
      t.latency += halves * ((g - 1) * inst.intra_node.latency + (k - 1) * inst.nic.latency);
      break;
    }
    case CollectiveAlgorithm::all_to_all: {
      const int rounds = ar ? 2 : 1;  // all-reduce = reduce-scatter then all-gather
      for (int r = 0; r < rounds; ++r) {
        t.add((g - 1) / g * S, k > 1 ? (k - 1) / k * S / (g * inst.all_to_all.net_efficiency) : 0.0);
        t.latency += k > 1 ? inst.nic.latency + inst.intra_node.latency : inst.intra_node.latency;
      }
      break;
    }
  }
  return t;
}

}  // namespace partune
