// DeepEP's node-aware token exchange (moe_token_dispatcher deepep; collective.hpp's
// node_aware_exchange_phases) against the plain exchange (NCCL's grouped pairs), by the
// bytes each puts on a member's NIC: the plain one sends the (n - g) / n of a member's S
// bytes meant for other nodes' GPUs, the node-aware one each token once to each other node
// its copies reach, S (remote nodes) / (copies). Where both are network-bound their times
// stand in that ratio; inside one node they are the same exchange.
#include <catch2/catch.hpp>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/expert_exchange.hpp"
#include "partune/costmodel/expert_routing.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

TEST_CASE("the node-aware exchange puts each token on the network once a node", "[deepep][collective]") {
  const InstanceType p5 = load_instance_type("p5.48xlarge");
  const double S = 256.0 * (1 << 20);  // a member's routed copies: 256 MiB
  const GroupSpan two_nodes{16, 2, 8}, eight_nodes{64, 8, 8}, one_node{8, 1, 8};
  // Eight copies a token reaching 0.9 other nodes on average against 8/16 of S sent off-node.
  const CollectivePhases aware = node_aware_exchange_phases(S, 8, 0.9, two_nodes, p5);
  const CollectivePhases plain = collective_phases(CollectiveKind::all_to_all, CollectiveAlgorithm::ring, S, two_nodes, p5);
  REQUIRE(aware.phase_count == 1);
  CHECK(aware.phases[0].net_bytes == Approx(S * 0.9 / 8));
  CHECK(aware.phases[0].intra_bytes == Approx(S * 7 / 8));  // every copy but the ones landing on their GPU
  CHECK(plain.phases[0].net_bytes == Approx(S * 8 / 16));
  const CollectiveCost a = phases_cost(aware, two_nodes, p5), b = phases_cost(plain, two_nodes, p5);
  CHECK(a.bandwidth_time / b.bandwidth_time == Approx((0.9 / 8) / (8.0 / 16)).epsilon(1e-9));
  CHECK(a.latency_time == Approx(b.latency_time));
  // Inside one node there is no network to spare: the plain exchange.
  const CollectiveCost in_node = phases_cost(node_aware_exchange_phases(S, 8, 0.0, one_node, p5), one_node, p5);
  CHECK(in_node.total() ==
        Approx(collective_cost(CollectiveKind::all_to_all, CollectiveAlgorithm::ring, S, one_node, p5).total()));
  // DeepSeek-V3 on 8 nodes: 3.175 other nodes a token with its groups, 4.633 without; the
  // plain exchange sends 56/64 of S off-node.
  ModelSpec v3;
  v3.experts = 256, v3.experts_per_token = 8, v3.router_groups = 8, v3.router_group_topk = 4;
  Job job;
  job.model = v3;
  job.cluster.instance = p5;
  job.parallel.moe_token_dispatcher = MoeDispatcher::deepep;
  const CollectivePhases grouped = expert_exchange_phases(job, S, eight_nodes);
  CHECK(grouped.phases[0].net_bytes / S == Approx(3.175 / 8).epsilon(1e-3));
  job.model.router_groups = job.model.router_group_topk = 0;
  CHECK(expert_exchange_phases(job, S, eight_nodes).phases[0].net_bytes / S == Approx(4.633 / 8).epsilon(1e-3));
  job.parallel.moe_token_dispatcher = MoeDispatcher::alltoall;
  CHECK(expert_exchange_phases(job, S, eight_nodes).phases[0].net_bytes / S == Approx(56.0 / 64));
}
