#pragma once
// Collective time on the two-level topology (NVSwitch inside a node, NICs between
// nodes). The algorithm decides the traffic pattern; the instance type says how fast
// links are and how well each implementation drives them.
//
// Each algorithm is written once, as phases (collective_phases): in a phase every member
// sends some bytes to its successor on its node and some through its own NIC to its
// successor on the next node, both at once, and waits the phase's hop latencies. The
// estimator's cost is those phases on idle links (collective_cost); the simulator sends
// the same phases as traffic (collective_traffic).
//
// Sizes: all_reduce and reduce_scatter take the full input buffer S; all_gather the full
// output S (each rank contributes S/n); send_recv the message; all_to_all a member's send
// buffer S (S/n to each member, itself included).
//
// Network share: the groups of one kind (all DP groups, all TP groups) communicate at
// the same time, so every GPU of a node sends through the node's NICs at once and one
// member gets 1/gpus_per_node of that node's network bandwidth.
#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune {

enum class CollectiveKind { all_reduce, all_gather, reduce_scatter, send_recv, all_to_all };
const char* to_string(CollectiveKind k);

struct CollectiveCost {
  double bandwidth_time = 0;  // s spent moving bytes
  double latency_time = 0;    // s of per-step latency
  double total() const { return bandwidth_time + latency_time; }
};

// One phase, as every member of the group runs it.
struct CollectivePhase {
  double intra_bytes = 0;  // to the member's successor on its node, over its NVSwitch port
  double net_bytes = 0;    // through its own NIC, to its successor on the next node
  double latency = 0;      // s: the phase's hops (the links themselves carry no latency)
};

// An algorithm's phases, run one after another. With net_efficiency < 1 the
// implementation drives the NICs below their achieved rate (NCCL rings on EFA).
struct CollectivePhases {
  CollectivePhase phases[4];
  int phase_count = 0;
  double net_efficiency = 1.0;  // of the NICs' achieved bandwidth, for this algorithm
  double intra_efficiency = 1.0;  // of the intra-node fabric's bandwidth, for this algorithm
  double launch_latency = 0;    // s per call, on top of the phases (collectives only)
  void add(double intra_bytes, double net_bytes, double latency) {
    phases[phase_count++] = {intra_bytes, net_bytes, latency};
  }
};

// The one description of each algorithm (tree falls back to ring except for an
// all-reduce across nodes; send_recv is one phase of the message). Empty for a group of
// one or no bytes.
CollectivePhases collective_phases(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                   const GroupSpan& span, const InstanceType& inst);

// The algorithm that runs: `algo` itself, or for CollectiveAlgorithm::nccl the one NCCL's
// tuner would pick (NCCL_ALGO unset): of ring and, for an all-reduce across nodes, tree
// (NCCL's double binary tree), the faster on idle links (collective_cost). NCCL's NVLS and
// PAT are not modelled (issue 51).
CollectiveAlgorithm resolved_algorithm(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                       const GroupSpan& span, const InstanceType& inst);

// The profile of the implementation that runs `algorithm` (hierarchical runs rings).
const CollectiveProfile& collective_profile(const InstanceType& inst, CollectiveAlgorithm algorithm);

// The phases on idle links: per phase, the slower of the member's NVSwitch port
// (group_intra_bw) and its NIC share (node network / gpus_per_node / oversubscription,
// times net_efficiency) for that phase's bytes; the phases' latencies plus launch_latency.
CollectiveCost collective_cost(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                               const GroupSpan& span, const InstanceType& inst,
                               double oversubscription = 1.0);

// The same phases as traffic, for the discrete-event simulator: net_bytes are divided by
// net_efficiency (the simulated NIC runs at its achieved rate), so that on idle links
// the phases take exactly collective_cost()'s bandwidth_time; `latency` is its
// latency_time (every phase's latency plus the launch latency), slept once at the end.
struct CollectiveTraffic {
  CollectivePhase phases[4];
  int phase_count = 0;
  double latency = 0;
};
CollectiveTraffic collective_traffic(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                     const GroupSpan& span, const InstanceType& inst);

// The bytes/s a group of this span can push per node onto the network (its NIC share).
double group_network_bw(const GroupSpan& span, const InstanceType& inst,
                        double oversubscription = 1.0);
// The bytes/s per GPU inside a node.
double group_intra_bw(const InstanceType& inst);

}  // namespace partune
