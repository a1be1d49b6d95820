#pragma once
// Where a token's routed copies go, on average, when the experts of a layer are spread in
// contiguous blocks over an expert group on several nodes (Megatron-Core's layout: expert
// rank r holds experts [r E / ep, (r + 1) E / ep), consecutive ranks fill a node). The
// router is taken as uniform over the experts it may pick (balanced routing; the skew of
// model.expert_load_skew paces the busiest rank, not the spread): a token picks
// experts_per_token distinct experts among all E, or, with group-limited routing
// (model.router_groups, router_group_topk), among the E M / G experts of M groups drawn
// uniformly among G.
//
// A node-aware dispatcher (DeepEP's normal kernels, DeepSeek-V3's IB-then-NVLink
// all-to-all, arXiv:2412.19437 §3.2.2) sends a token once to each other node holding one of
// its experts and forwards the copies inside the node: its network bytes scale with the
// nodes reached, not the copies.
#include "partune/costmodel/model.hpp"

namespace partune {

// The probability that a given node of an expert group spread over `nodes` nodes holds at
// least one of a token's experts. With groups, exact when a node's experts are whole groups
// (E / nodes a multiple of E / G) or a group's experts span whole nodes (the converse);
// other layouts are priced as if the routing had no groups. 1 when nodes <= 1.
double node_reached_probability(const ModelSpec& m, int nodes);

// The other nodes a token's copies reach on average: (nodes - 1) x node_reached_probability
// (the token's own node is reached over NVLink, not the network). 0 when nodes <= 1.
double remote_nodes_reached(const ModelSpec& m, int nodes);

}  // namespace partune
