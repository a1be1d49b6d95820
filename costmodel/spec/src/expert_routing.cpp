#include "partune/costmodel/expert_routing.hpp"

#include <algorithm>

namespace partune {

namespace {

// C(n - a, k) / C(n, k): the chance that k distinct picks among n all miss a given a.
double all_miss(double n, double a, int k) {
  if (a <= 0) return 1.0;
  double p = 1.0;
  for (int i = 0; i < k; ++i) {
    if (n - a - i <= 0) return 0.0;
    p *= (n - a - i) / (n - i);
  }
  return p;
}

// C(c, j) C(G - c, M - j) / C(G, M): j of the c groups on a node among the M drawn of G.
double groups_drawn(int G, int c, int M, int j) {
  auto choose = [](int n, int k) {
    if (k < 0 || k > n) return 0.0;
    double r = 1.0;
    for (int i = 1; i <= k; ++i) r = r * (n - k + i) / i;
    return r;
  };
  return choose(c, j) * choose(G - c, M - j) / choose(G, M);
}

}  // namespace

double node_reached_probability(const ModelSpec& m, int nodes) {
  if (nodes <= 1 || m.experts <= 0) return 1.0;
  const int E = m.experts, k = m.experts_per_token;
  const double on_node = static_cast<double>(E) / nodes;
  const int G = m.router_groups, M = m.router_group_topk;
  const bool grouped = G > 1 && M < G;
  if (!grouped) return 1.0 - all_miss(E, on_node, k);
  const int per_group = E / G;
  const double candidates = static_cast<double>(M) * per_group;  // the experts of a token's groups
  if (E % nodes == 0 && (E / nodes) % per_group == 0) {
    // The node holds c whole groups; j of them drawn, the token's k among the M groups' experts.
    const int c = (E / nodes) / per_group;
    double miss = 0;
    for (int j = 0; j <= std::min(c, M); ++j)
      miss += groups_drawn(G, c, M, j) * all_miss(candidates, static_cast<double>(j) * per_group, k);
    return 1.0 - miss;
  }
  if (E % nodes == 0 && per_group % (E / nodes) == 0) {
    // A group spans several nodes: the node's group drawn (M / G), then one of its experts.
    const double drawn = static_cast<double>(M) / G;
    return drawn * (1.0 - all_miss(candidates, on_node, k));
  }
  return 1.0 - all_miss(E, on_node, k);
}

double remote_nodes_reached(const ModelSpec& m, int nodes) {
  if (nodes <= 1) return 0.0;
  return (nodes - 1) * node_reached_probability(m, nodes);
}

}  // namespace partune
