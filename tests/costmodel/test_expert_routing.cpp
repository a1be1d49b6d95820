// The nodes a token's routed copies reach (expert_routing.hpp), against a Monte Carlo of
// the router it describes: each token draws its experts_per_token distinct experts
// uniformly (with groups: router_group_topk distinct groups uniformly, then its experts
// among theirs), the experts in contiguous blocks over the nodes. 200,000 tokens, a fixed
// seed: the sampling error of a probability is below 0.0012 (one standard deviation), the
// checks allow 0.005. And two cases by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/expert_routing.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using partune::testing::scenario_error_key;

namespace {

ModelSpec routed(int experts, int per_token, int groups = 0, int group_topk = 0) {
  ModelSpec m;
  m.experts = experts;
  m.experts_per_token = per_token;
  m.router_groups = groups;
  m.router_group_topk = group_topk;
  return m;
}

// The share of tokens whose experts include one on node 0 of `nodes`.
double sampled_node_reached(const ModelSpec& m, int nodes, int tokens = 200000) {
  std::mt19937_64 rng(12345);
  const int E = m.experts, G = m.router_groups > 0 ? m.router_groups : 1, M = m.router_groups > 0 ? m.router_group_topk : 1;
  const int per_group = E / G, on_node = E / nodes;
  std::vector<int> groups(G), pool;
  std::iota(groups.begin(), groups.end(), 0);
  int hits = 0;
  for (int t = 0; t < tokens; ++t) {
    std::shuffle(groups.begin(), groups.end(), rng);
    pool.clear();
    for (int g = 0; g < M; ++g)
      for (int e = 0; e < per_group; ++e) pool.push_back(groups[g] * per_group + e);
    std::shuffle(pool.begin(), pool.end(), rng);
    bool hit = false;
    for (int i = 0; i < m.experts_per_token; ++i) hit = hit || pool[i] < on_node;
    hits += hit;
  }
  return static_cast<double>(hits) / tokens;
}

}  // namespace

TEST_CASE("a token's experts reach a node as a uniform router's draws do", "[expert_routing]") {
  struct Case {
    ModelSpec m;
    int nodes;
  };
  const std::vector<Case> cases = {
      {routed(256, 8), 8},         // DeepSeek-V3's experts without groups, EP 64 on 8 nodes
      {routed(256, 8, 8, 4), 8},   // with its node-limited routing: a group a node
      {routed(256, 8, 8, 4), 4},   // EP 32 on 4 nodes: two groups a node
      {routed(256, 8, 4, 2), 8},   // a group spanning two nodes
      {routed(128, 8), 16},        // Qwen3-235B's 128, top-8, on 16 nodes
      {routed(32, 3), 2},          // MegaScale-MoE's 32, top-3, on 2 nodes
  };
  for (const Case& c : cases) {
    INFO(c.m.experts << " experts, top-" << c.m.experts_per_token << ", groups " << c.m.router_groups << "/"
                     << c.m.router_group_topk << ", " << c.nodes << " nodes");
    CHECK(node_reached_probability(c.m, c.nodes) == Approx(sampled_node_reached(c.m, c.nodes)).margin(0.005));
  }
}

TEST_CASE("the nodes reached, by hand", "[expert_routing]") {
  // One expert a token reaches its node with probability 1/nodes.
  CHECK(node_reached_probability(routed(64, 1), 8) == Approx(1.0 / 8));
  // DeepSeek-V3 on 8 nodes with 4 of 8 groups a token, a group a node: the node's group is
  // drawn half the time (C(7,3) / C(8,4) = 35/70), and then some of the token's 8 experts
  // among the 4 groups' 128 land in its 32 unless all 8 fall in the other 96:
  // C(96,8) / C(128,8) = 96·95·…·89 / (128·127·…·121) = 0.09275.
  double miss = 1.0;
  for (int i = 0; i < 8; ++i) miss *= (96.0 - i) / (128.0 - i);
  CHECK(miss == Approx(0.09275).epsilon(1e-3));
  CHECK(node_reached_probability(routed(256, 8, 8, 4), 8) == Approx(0.5 * (1.0 - miss)));
  // ... so a token reaches 7 x 0.4536 = 3.175 other nodes, under the 4 its groups allow;
  // without the groups, 7 x (1 - C(224,8)/C(256,8)) = 4.633.
  CHECK(remote_nodes_reached(routed(256, 8, 8, 4), 8) == Approx(3.175).epsilon(1e-3));
  CHECK(remote_nodes_reached(routed(256, 8), 8) == Approx(4.633).epsilon(1e-3));
  // One node: nothing crosses the network.
  CHECK(remote_nodes_reached(routed(256, 8), 1) == 0.0);
}

TEST_CASE("group-limited routing is read whole and checked", "[expert_routing][scenario]") {
  auto job = [](const std::string& routing) {
    return "kind: job\nname: t\nmodel: {base: deepseek-v3" + routing +
           "}\ncluster: {instance_type: p5.48xlarge, nodes: 8}\ntraining: {global_batch: 64, precision: bf16}\n"
           "parallel: {expert_parallel_degree: 8, microbatches: 1}\n";
  };
  const Job preset = parse_job(job(""), "t.yaml");
  CHECK(preset.model.router_groups == 8);
  CHECK(preset.model.router_group_topk == 4);
  CHECK(scenario_error_key(job(", router_groups: 7"), "t.yaml") == "model.router_groups");      // 256 / 7
  CHECK(scenario_error_key(job(", router_group_topk: 9"), "t.yaml") == "model.router_group_topk");  // > groups
  CHECK(scenario_error_key(job(", router_groups: 64, router_group_topk: 1"), "t.yaml") ==
        "model.router_group_topk");  // one group of 4 experts cannot hold 8
  CHECK(parse_job(job(", router_groups: 16, router_group_topk: 2"), "t.yaml").model.router_groups == 16);
}
