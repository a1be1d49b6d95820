#pragma once
// One collective alone on an idle simulated platform, through the simulator's own code
// path (the platform of platform.cpp, the phases of World::execute_collective): what the
// estimator's closed form (collective_cost) must agree with.
#include <vector>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune::sim {

struct CollectiveCase {
  CollectiveKind kind = CollectiveKind::all_reduce;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  double bytes = 0;  // sized as in collective.hpp
  GroupSpan span;    // span.per_node must divide the instance's gpus_per_node
};

// Simulated seconds of each case, run one after another on one idle platform of
// `instance` nodes (in a child process, as simulate()). The group's members sit on its
// first span.nodes nodes at local GPUs 0, G/g, 2G/g, ... (G = gpus_per_node, g =
// span.per_node); the node's other GPUs belong to sibling groups of the same kind that
// communicate at the same moment (collective.hpp's network share), which is simulated by
// letting each member carry, on its network flows, the bytes of the siblings that share
// its NIC. Throws std::invalid_argument for a span the layout cannot hold and
// std::runtime_error if the simulation fails.
std::vector<double> simulate_collectives(const InstanceType& instance, const std::vector<CollectiveCase>& cases);

// One case.
double simulate_collective(CollectiveKind kind, CollectiveAlgorithm algorithm, double bytes, const GroupSpan& span,
                           const InstanceType& instance);

}  // namespace partune::sim
