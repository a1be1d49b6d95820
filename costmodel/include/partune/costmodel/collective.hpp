#pragma once
// Collective time on the two-level topology (NVSwitch inside a node, NICs between
// nodes). The algorithm decides the traffic pattern; the instance type says how fast
// links are and how well each implementation drives them.
//
// Sizes: all_reduce and reduce_scatter take the full input buffer S; all_gather the full
// output S (each rank contributes S/n); send_recv the message.
//
// Network share: the groups of one kind (all DP groups, all TP groups) communicate at
// the same time, so a group with `per_node` ranks on a node gets per_node/gpus_per_node
// of that node's NIC bandwidth — GPUs reach the network through their own NIC.
#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune {

enum class CollectiveKind { all_reduce, all_gather, reduce_scatter, send_recv };
const char* to_string(CollectiveKind k);

struct CollectiveCost {
  double bandwidth_time = 0;  // s spent moving bytes
  double latency_time = 0;    // s of per-step latency
  double total() const { return bandwidth_time + latency_time; }
};

// The profile of the implementation that runs `algorithm` (hierarchical runs rings).
const CollectiveProfile& collective_profile(const InstanceType& inst, CollectiveAlgorithm algorithm);

// Links' time plus the implementation's launch_latency (collectives only, not send_recv).
CollectiveCost collective_cost(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                               const GroupSpan& span, const InstanceType& inst,
                               double oversubscription = 1.0);

// The same collectives as traffic, for the discrete-event simulator: per member, phases
// run one after another; inside a phase a member sends `intra_bytes` to its successor in
// the node and `net_bytes` to its successor on the next node (through its own NIC), both
// at once. Byte counts already include the algorithm's network efficiency, so that on
// free links the phases take exactly collective_cost()'s bandwidth_time; `latency` is
// its latency_time.
struct CollectivePhase {
  double intra_bytes = 0;
  double net_bytes = 0;
};
struct CollectiveTraffic {
  CollectivePhase phases[4];
  int phase_count = 0;
  double latency = 0;
  void add(double intra, double net) { phases[phase_count++] = {intra, net}; }
};
CollectiveTraffic collective_traffic(CollectiveKind kind, CollectiveAlgorithm algo, double bytes,
                                     const GroupSpan& span, const InstanceType& inst);

// The bytes/s a group of this span can push per node onto the network (its NIC share).
double group_network_bw(const GroupSpan& span, const InstanceType& inst,
                        double oversubscription = 1.0);
// The bytes/s per GPU inside a node.
double group_intra_bw(const InstanceType& inst);

}  // namespace partune
