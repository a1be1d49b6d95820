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
  double intra_hops = 0;   // the steps it waits on: over NVLink
  double net_hops = 0;     // and across the network
};

// An algorithm's phases, run one after another. With net_efficiency < 1 the
// implementation drives the NICs below their achieved rate (NCCL rings on EFA).
struct CollectivePhases {
  CollectivePhase phases[4];
  int phase_count = 0;
  double net_efficiency = 1.0;  // of the NICs' achieved bandwidth, for this algorithm
  double intra_efficiency = 1.0;  // of the intra-node fabric's bandwidth, for this algorithm
  double launch_latency = 0;    // s per call, on top of the phases (collectives only)
  // The NCCL protocol that runs (nccl_tuner.hpp): automatic where the instance has no NCCL
  // tables (the hops cost their links' latency) or the pattern is not NCCL's (hierarchical,
  // all-to-all, send/receive).
  NcclProtocol protocol = NcclProtocol::automatic;
  void add(double intra_bytes, double net_bytes, double intra_hops, double net_hops) {
    phases[phase_count++] = {intra_bytes, net_bytes, 0.0, intra_hops, net_hops};
  }
};

// The one description of each algorithm (tree falls back to ring except for an
// all-reduce across nodes, nvls except for an all-reduce inside one NVLink domain of a
// fabric that has it; send_recv is one phase of the message). Empty for a group of one or
// no bytes. On an instance with NCCL's tables (collectives.nccl) a ring, tree or NVLS call
// runs the protocol of InstanceType::nccl.protocol, or the fastest of LL, LL128 and Simple
// on idle links (NCCL_PROTO unset): each hop costs NCCL's hardware latency for it plus the
// link's own, the call NCCL's base latency, and the protocol scales and caps the bandwidth.
CollectivePhases collective_phases(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                   const GroupSpan& span, const InstanceType& inst);

// The algorithm that runs: `algo` itself, or for CollectiveAlgorithm::nccl the one NCCL's
// tuner would pick (NCCL_ALGO unset): of ring, for an all-reduce across nodes tree (NCCL's
// double binary tree) and for one inside an NVLink domain with NVLS nvls, the fastest on
// idle links (collective_cost). NCCL's PAT is not modelled.
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

// A node-aware token exchange (DeepEP's normal kernels, DeepSeek-V3's IB-then-NVLink
// all-to-all, arXiv:2412.19437 §3.2.2): a member's S bytes are `copies` rows a token (S /
// copies a token); each token crosses the network once to each of the `remote_nodes` other
// nodes its copies reach (expert_routing.hpp), landing on the GPU of the sender's local
// index there, which forwards the copies to their experts' GPUs over NVSwitch; the copies
// for the sender's own node go over NVSwitch too. Both ride at once (DeepEP pipelines the
// RDMA and NVLink chunks): one phase of S (remote_nodes / copies) network bytes and
// S (g - 1) / g NVSwitch bytes, at the instance's ring efficiencies and NCCL's send/receive
// latencies as the plain exchange (the measured rates, DeepEP's README: 43-58 GB/s of a
// 50 GB/s CX7 NIC, 153-158 of 160 GB/s NVLink on H800, are near the links' own). Inside one
// node, the plain exchange.
CollectivePhases node_aware_exchange_phases(double bytes, double copies, double remote_nodes, const GroupSpan& span,
                                            const InstanceType& inst);
// collective_cost and collective_traffic of phases already made.
CollectiveCost phases_cost(const CollectivePhases& p, const GroupSpan& span, const InstanceType& inst,
                           double oversubscription = 1.0);
CollectiveTraffic phases_traffic(const CollectivePhases& p);

// The bytes/s a group of this span can push per node onto the network (its NIC share).
double group_network_bw(const GroupSpan& span, const InstanceType& inst,
                        double oversubscription = 1.0);
// The bytes/s per GPU inside a node.
double group_intra_bw(const InstanceType& inst);

}  // namespace partune
