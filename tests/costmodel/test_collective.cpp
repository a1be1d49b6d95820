#include <catch2/catch.hpp>

#include <cmath>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

namespace {

// A hand-built node: 8 GPUs, 100 GB/s per GPU inside the node with 2 us per hop, and
// 4 NICs of 12.5 GB/s (50 GB/s per node) with 20 us per hop. Every efficiency is 1, so
// the expected times below are pure alpha-beta arithmetic.
constexpr double kIntraBw = 100e9, kIntraLat = 2e-6;
constexpr double kNicBw = 12.5e9, kNicLat = 20e-6, kNodeNet = 4 * kNicBw;

InstanceType test_instance() {
  InstanceType it;
  it.name = "test";
  it.gpus_per_node = 8;
  it.intra_node = {kIntraBw, kIntraLat, 1.0};
  it.nics_per_node = 4;
  it.nic = {kNicBw, kNicLat, 1.0};
  it.ring = {1.0, 1.0};
  it.tree = {1.0, 1.0};
  it.all_to_all = {1.0, 1.0};
  return it;
}

GroupSpan span(int size, int nodes, int per_node) { return GroupSpan{size, nodes, per_node}; }

}  // namespace

TEST_CASE("ring collectives inside one node follow the alpha-beta closed form", "[collective]") {
  const InstanceType it = test_instance();
  const double S = GENERATE(1e3, 1.0 * (1 << 20), 256e6, 4e9);
  const int n = GENERATE(2, 3, 4, 8);
  INFO("n " << n << " S " << S);
  const GroupSpan sp = span(n, 1, n);

  SECTION("all_reduce: 2(n-1)/n S/B + 2(n-1) alpha") {
    const CollectiveCost c = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, sp, it);
    CHECK(c.bandwidth_time == Approx(2.0 * (n - 1) / n * S / kIntraBw).epsilon(1e-12));
    CHECK(c.latency_time == Approx(2.0 * (n - 1) * kIntraLat).epsilon(1e-12));
    CHECK(c.total() == Approx(2.0 * (n - 1) / n * S / kIntraBw + 2.0 * (n - 1) * kIntraLat).epsilon(1e-12));
  }
  SECTION("all_gather: (n-1)/n S/B + (n-1) alpha") {
    const CollectiveCost c = collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::ring, S, sp, it);
    CHECK(c.total() == Approx(1.0 * (n - 1) / n * S / kIntraBw + (n - 1) * kIntraLat).epsilon(1e-12));
  }
  SECTION("reduce_scatter costs the same as all_gather") {
    const CollectiveCost c =
        collective_cost(CollectiveKind::reduce_scatter, CollectiveAlgorithm::ring, S, sp, it);
    CHECK(c.total() == Approx(1.0 * (n - 1) / n * S / kIntraBw + (n - 1) * kIntraLat).epsilon(1e-12));
  }
}

TEST_CASE("intra-node link efficiency scales the bandwidth term", "[collective]") {
  InstanceType it = test_instance();
  it.intra_node.efficiency = 0.5;
  const double S = 1e9;
  const CollectiveCost c =
      collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, span(8, 1, 8), it);
  CHECK(c.bandwidth_time == Approx(2.0 * 7 / 8 * S / (0.5 * kIntraBw)).epsilon(1e-12));
  CHECK(group_intra_bw(it) == Approx(50e9));
}

TEST_CASE("across nodes a ring runs at the group's share of the node's NICs", "[collective]") {
  const InstanceType it = test_instance();
  const double S = 1e9;

  SECTION("one rank per node: 1/8 of 50 GB/s = 6.25 GB/s") {
    const GroupSpan sp = span(4, 4, 1);
    CHECK(group_network_bw(sp, it) == Approx(kNodeNet / 8));
    const CollectiveCost ar = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, sp, it);
    CHECK(ar.bandwidth_time == Approx(2.0 * 3 / 4 * S / 6.25e9).epsilon(1e-12));
    CHECK(ar.latency_time == Approx(2.0 * 3 * kNicLat).epsilon(1e-12));
    const CollectiveCost ag = collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::ring, S, sp, it);
    CHECK(ag.total() == Approx(3.0 / 4 * S / 6.25e9 + 3 * kNicLat).epsilon(1e-12));
  }
  SECTION("four ranks per node: half the node's NICs = 25 GB/s") {
    const GroupSpan sp = span(8, 2, 4);
    const CollectiveCost ar = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, sp, it);
    CHECK(ar.bandwidth_time == Approx(2.0 * 7 / 8 * S / 25e9).epsilon(1e-12));
    // 7 hops a half: 6 over NVSwitch, 1 across the network (NCCL's nInterSteps = nodes - 1).
    CHECK(ar.latency_time == Approx(2.0 * (6 * kIntraLat + 1 * kNicLat)).epsilon(1e-12));
  }
  SECTION("a whole node per group: all 50 GB/s") {
    const GroupSpan sp = span(16, 2, 8);
    const CollectiveCost ar = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, sp, it);
    CHECK(ar.bandwidth_time == Approx(2.0 * 15 / 16 * S / 50e9).epsilon(1e-12));
  }
  SECTION("NIC efficiency, ring net_efficiency and oversubscription all divide the bandwidth") {
    InstanceType slow = it;
    slow.nic.efficiency = 0.8;
    slow.ring.net_efficiency = 0.5;
    const GroupSpan sp = span(16, 2, 8);
    const CollectiveCost ar =
        collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, sp, slow, 2.0);
    CHECK(ar.bandwidth_time == Approx(2.0 * 15 / 16 * S / (50e9 * 0.8 * 0.5 / 2.0)).epsilon(1e-12));
  }
  SECTION("when the NICs are faster than NVSwitch, the intra-node link bounds the ring") {
    InstanceType fast = it;
    fast.nic.bw = 1000e9;  // 4 TB/s per node
    const CollectiveCost ar =
        collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, span(16, 2, 8), fast);
    CHECK(ar.bandwidth_time == Approx(2.0 * 15 / 16 * S / kIntraBw).epsilon(1e-12));
  }
}

TEST_CASE("hierarchical collectives: intra-node ring, then inter-node ring", "[collective]") {
  // g ranks per node on k nodes, NIC share B_net = 50 GB/s * g/8:
  //   all_reduce = 2[(g-1)/g S/B_in + (k-1)/k S/B_net] + 2[(g-1) a_in + (k-1) a_net]
  //   all_gather = half of that.
  const InstanceType it = test_instance();
  const double S = 2e9;
  SECTION("16 ranks on 2 nodes") {
    const GroupSpan sp = span(16, 2, 8);
    const CollectiveCost ar =
        collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::hierarchical, S, sp, it);
    CHECK(ar.bandwidth_time == Approx(2.0 * (7.0 / 8 * S / kIntraBw + 1.0 / 2 * S / 50e9)).epsilon(1e-12));
    CHECK(ar.latency_time == Approx(2.0 * (7 * kIntraLat + 1 * kNicLat)).epsilon(1e-12));
    const CollectiveCost ag =
        collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::hierarchical, S, sp, it);
    CHECK(ag.total() == Approx(7.0 / 8 * S / kIntraBw + 1.0 / 2 * S / 50e9 + 7 * kIntraLat + kNicLat).epsilon(1e-12));
  }
  SECTION("8 ranks: 2 per node on 4 nodes") {
    const GroupSpan sp = span(8, 4, 2);
    const CollectiveCost ag =
        collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::hierarchical, S, sp, it);
    CHECK(ag.bandwidth_time == Approx(1.0 / 2 * S / kIntraBw + 3.0 / 4 * S / 12.5e9).epsilon(1e-12));
    CHECK(ag.latency_time == Approx(1 * kIntraLat + 3 * kNicLat).epsilon(1e-12));
  }
  SECTION("beats a flat ring across nodes (fewer slow hops)") {
    const GroupSpan sp = span(32, 4, 8);
    CHECK(collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::hierarchical, 1e6, sp, it).total() <
          collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, 1e6, sp, it).total());
  }
}

TEST_CASE("all_to_all collectives: one network round, pipelined with NVSwitch", "[collective]") {
  // all_gather / reduce_scatter over g per node on k nodes:
  //   bandwidth = max((g-1)/g S/B_in, (k-1)/k S/B_net), latency = a_net + a_in;
  //   all_reduce = reduce_scatter + all_gather.
  const InstanceType it = test_instance();
  const double S = 1e9;
  SECTION("32 ranks on 4 nodes: the network is the bottleneck") {
    const GroupSpan sp = span(32, 4, 8);
    const CollectiveCost ag = collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::all_to_all, S, sp, it);
    CHECK(ag.bandwidth_time == Approx(3.0 / 4 * S / 50e9).epsilon(1e-12));
    CHECK(ag.latency_time == Approx(kNicLat + kIntraLat).epsilon(1e-12));
    const CollectiveCost ar = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::all_to_all, S, sp, it);
    CHECK(ar.total() == Approx(2 * (3.0 / 4 * S / 50e9 + kNicLat + kIntraLat)).epsilon(1e-12));
  }
  SECTION("NVSwitch bound when the network is fast") {
    InstanceType fast = it;
    fast.nic.bw = 1000e9;
    const GroupSpan sp = span(16, 2, 8);
    const CollectiveCost ag =
        collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::all_to_all, S, sp, fast);
    CHECK(ag.bandwidth_time == Approx(7.0 / 8 * S / kIntraBw).epsilon(1e-12));
  }
  SECTION("inside one node") {
    const CollectiveCost ag =
        collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::all_to_all, S, span(8, 1, 8), it);
    CHECK(ag.bandwidth_time == Approx(7.0 / 8 * S / kIntraBw).epsilon(1e-12));
    CHECK(ag.latency_time == Approx(kIntraLat).epsilon(1e-12));
  }
  SECTION("all_to_all net_efficiency applies to the network stage only") {
    InstanceType half = it;
    half.all_to_all.net_efficiency = 0.5;
    const CollectiveCost ag =
        collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::all_to_all, S, span(32, 4, 8), half);
    CHECK(ag.bandwidth_time == Approx(3.0 / 4 * S / 25e9).epsilon(1e-12));
  }
}

TEST_CASE("all_to_all latency stays flat with more nodes while ring latency grows with the nodes it crosses",
          "[collective]") {
  const InstanceType it = test_instance();
  const double S = 8;  // latency-bound message
  double a2a_first = -1;
  for (int k : {2, 4, 8, 16, 32}) {
    INFO(k << " nodes");
    const GroupSpan sp = span(8 * k, k, 8);
    const CollectiveCost a2a =
        collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::all_to_all, S, sp, it);
    if (a2a_first < 0) a2a_first = a2a.latency_time;
    CHECK(a2a.latency_time == Approx(a2a_first));
    const CollectiveCost ring = collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::ring, S, sp, it);
    // 8k - 1 hops: k - 1 across the network, the other 7k over NVSwitch.
    CHECK(ring.latency_time == Approx((k - 1.0) * kNicLat + 7.0 * k * kIntraLat).epsilon(1e-12));
  }
}

TEST_CASE("tree all-reduce across nodes: S/B and log2(k) network hops each way", "[collective]") {
  const InstanceType it = test_instance();
  const double S = 1e9;
  const CollectiveCost c = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::tree, S, span(64, 8, 8), it);
  CHECK(c.bandwidth_time == Approx(S / 50e9).epsilon(1e-12));
  CHECK(c.latency_time == Approx(2.0 * (3 * kNicLat + 7 * kIntraLat)).epsilon(1e-12));
  SECTION("inside a node the tree falls back to the ring") {
    const CollectiveCost in = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::tree, S, span(8, 1, 8), it);
    CHECK(in.total() == Approx(2.0 * 7 / 8 * S / kIntraBw + 14 * kIntraLat).epsilon(1e-12));
  }
}

TEST_CASE("send_recv: one message over NVSwitch or the sender's NIC share", "[collective]") {
  const InstanceType it = test_instance();
  const double S = 64e6;
  const CollectiveCost in = collective_cost(CollectiveKind::send_recv, CollectiveAlgorithm::ring, S, span(2, 1, 2), it);
  CHECK(in.total() == Approx(S / kIntraBw + kIntraLat).epsilon(1e-12));
  const CollectiveCost out = collective_cost(CollectiveKind::send_recv, CollectiveAlgorithm::ring, S, span(2, 2, 1), it);
  CHECK(out.total() == Approx(S / (kNodeNet / 8) + kNicLat).epsilon(1e-12));
}

TEST_CASE("a group of one rank, or an empty message, costs nothing", "[collective]") {
  const InstanceType it = test_instance();
  for (auto kind : {CollectiveKind::all_reduce, CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                    CollectiveKind::send_recv})
    for (auto algo : {CollectiveAlgorithm::ring, CollectiveAlgorithm::tree, CollectiveAlgorithm::hierarchical,
                      CollectiveAlgorithm::all_to_all}) {
      INFO(to_string(kind) << " " << to_string(algo));
      CHECK(collective_cost(kind, algo, 1e9, span(1, 1, 1), it).total() == 0.0);
      CHECK(collective_cost(kind, algo, 0.0, span(16, 2, 8), it).total() == 0.0);
    }
}

TEST_CASE("node network bandwidth = NICs x line rate x efficiency, shared per GPU", "[collective]") {
  // p4d-like node: 4 x 100 Gbps EFA = 50 GB/s line rate; achieved = line rate x efficiency.
  InstanceType it = test_instance();
  it.nics_per_node = 4;
  it.nic.bw = 100e9 / 8;
  it.nic.efficiency = 0.84;
  CHECK(it.node_net_bw() == Approx(50e9 * 0.84));
  CHECK(group_network_bw(span(8, 8, 1), it) == Approx(50e9 * 0.84 / 8));
  CHECK(group_network_bw(span(8, 8, 1), it, 4.0) == Approx(50e9 * 0.84 / 32));
}

TEST_CASE("launch_us adds one fixed cost per collective, in the estimate and in the traffic", "[collective]") {
  // The hand-built node with a launch latency per implementation: every collective pays
  // its own implementation's once (hierarchical runs rings; tree outside an all-reduce
  // across nodes is a ring), on top of the links' alpha-beta terms; send_recv pays none.
  InstanceType it = test_instance();
  it.ring.launch_latency = 1e-3;
  it.tree.launch_latency = 2e-3;
  it.all_to_all.launch_latency = 3e-3;
  const GroupSpan sp = span(16, 2, 8);  // B_net = 50 GB/s
  const double S = 64e6;
  struct Case {
    CollectiveKind kind;
    CollectiveAlgorithm algo;
    double expected;
  };
  for (const Case& c :
       {Case{CollectiveKind::all_reduce, CollectiveAlgorithm::ring,
             2.0 * 15 / 16 * S / 50e9 + 2.0 * (kNicLat + 14 * kIntraLat) + 1e-3},
        Case{CollectiveKind::all_reduce, CollectiveAlgorithm::hierarchical,
             2.0 * (7.0 / 8 * S / kIntraBw + S / 2 / 50e9) + 2.0 * (7 * kIntraLat + kNicLat) + 1e-3},
        Case{CollectiveKind::all_reduce, CollectiveAlgorithm::tree, S / 50e9 + 2.0 * (kNicLat + 7 * kIntraLat) + 2e-3},
        Case{CollectiveKind::all_gather, CollectiveAlgorithm::tree, 15.0 / 16 * S / 50e9 + kNicLat + 14 * kIntraLat + 1e-3},
        Case{CollectiveKind::all_gather, CollectiveAlgorithm::all_to_all, S / 2 / 50e9 + kNicLat + kIntraLat + 3e-3},
        Case{CollectiveKind::all_reduce, CollectiveAlgorithm::all_to_all,
             2.0 * (S / 2 / 50e9 + kNicLat + kIntraLat) + 3e-3},
        Case{CollectiveKind::reduce_scatter, CollectiveAlgorithm::ring,
             15.0 / 16 * S / 50e9 + kNicLat + 14 * kIntraLat + 1e-3}}) {
    INFO(to_string(c.kind) << " " << to_string(c.algo));
    const CollectiveCost cost = collective_cost(c.kind, c.algo, S, sp, it);
    CHECK(cost.total() == Approx(c.expected).epsilon(1e-12));
    CHECK(collective_traffic(c.kind, c.algo, S, sp, it).latency == Approx(cost.latency_time).epsilon(1e-12));
  }
  CHECK(collective_cost(CollectiveKind::send_recv, CollectiveAlgorithm::ring, S, span(2, 2, 1), it).total() ==
        Approx(S / (kNodeNet / 8) + kNicLat).epsilon(1e-12));
}

// The p4d.24xlarge numbers, typed in from scenarios/clusters/p4d.24xlarge.yaml:
// NVSwitch 300 GB/s x 0.77 per GPU, a hop 0.2 us beyond NCCL's own; 4 EFA NICs of 100 Gb/s
// x 0.908 (45.4 GB/s per node, 5.675 GB/s per GPU when the whole node communicates), a
// hop 67 us beyond NCCL's; ring, tree and all_to_all net_efficiency 1.0 (today's stack;
// the 2022 stack's 0.55 is test_collective_stack.cpp's); no launch latency; NCCL's Ampere
// tables on 8 channels. And NCCL 2.30's constants (MB26 §2.1), typed in from its table: at
// these sizes every ring and tree runs Simple (LL128's cap, 8 channels x 20 GB/s, is below
// NVSwitch's 231 GB/s; LL runs at half the rate): a call's base 8.4 us, a ring's NVLink
// step 3.4 us, a tree's 4.0 us, a network step 14 us; the tree at 0.92 of its links.
namespace {
constexpr double kP4dIntra = 300e9 * 0.77, kP4dIntraLat = 0.2e-6;
constexpr double kP4dNode = 4 * 100e9 / 8 * 0.908, kP4dNicLat = 67e-6, kP4dRingEff = 1.0;
constexpr double kSimpleBase = 8.4e-6, kRingNvlink = 3.4e-6, kTreeNvlink = 4.0e-6, kSimpleNet = 14e-6;
constexpr double kRingHop = kRingNvlink + kP4dIntraLat, kNetHop = kSimpleNet + kP4dNicLat;
}  // namespace

TEST_CASE("p4d.24xlarge: the published-table collectives written out by hand", "[collective]") {
  const InstanceType p4d = load_instance_type("p4d.24xlarge");
  const double S = 512e6;
  SECTION("tensor all-reduce inside a node: 2(n-1)/n S/B_nvs + base + 2(n-1) Simple NVLink steps") {
    for (int n : {2, 4, 8}) {
      INFO("n " << n);
      CHECK(collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, span(n, 1, n), p4d).total() ==
            Approx(2.0 * (n - 1) / n * S / kP4dIntra + kSimpleBase + 2.0 * (n - 1) * kRingHop).epsilon(1e-9));
    }
  }
  SECTION("data-parallel ring all-reduce over 4 whole nodes: NIC-bound at 45 GB/s") {
    CHECK(collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, span(32, 4, 8), p4d).total() ==
          Approx(2.0 * 31 / 32 * S / (kP4dNode * kP4dRingEff) + kSimpleBase + 2.0 * (28 * kRingHop + 3 * kNetHop))
                    .epsilon(1e-9));
  }
  SECTION("one member per node: 1/8 of the node's network") {
    CHECK(collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::ring, S, span(4, 4, 1), p4d).total() ==
          Approx(3.0 / 4 * S / (kP4dNode / 8 * kP4dRingEff) + kSimpleBase + 3 * kNetHop).epsilon(1e-9));
  }
  SECTION("tree all-reduce over 2 nodes: S at 0.92 of 45 GB/s, one network step and 7 NVLink steps each way") {
    CHECK(collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::tree, S, span(16, 2, 8), p4d).total() ==
          Approx(S / (0.92 * kP4dNode) + kSimpleBase + 2 * (kNetHop + 7 * (kTreeNvlink + kP4dIntraLat)))
              .epsilon(1e-9));
  }
  SECTION("hierarchical all-reduce over 4 nodes: not an NCCL pattern, its hops at the links' latencies") {
    CHECK(collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::hierarchical, S, span(32, 4, 8), p4d)
              .total() == Approx(2 * (7.0 / 8 * S / kP4dIntra + 3.0 / 4 * S / (kP4dNode * kP4dRingEff)) +
                                 2 * (7 * kP4dIntraLat + 3 * kP4dNicLat))
                              .epsilon(1e-9));
  }
  SECTION("SMDDP all-to-all all-gather over 8 nodes: one network round at 45 GB/s") {
    CHECK(collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::all_to_all, S, span(64, 8, 8), p4d)
              .total() == Approx(7.0 / 8 * S / kP4dNode + kP4dNicLat + kP4dIntraLat).epsilon(1e-9));
  }
  SECTION("a pipeline hop between nodes: the GPU's 5.7 GB/s share after NCCL's Simple rendezvous") {
    CHECK(collective_cost(CollectiveKind::send_recv, CollectiveAlgorithm::ring, S, span(2, 2, 1), p4d).total() ==
          Approx(S / (kP4dNode / 8) + kSimpleBase + 2 * kNetHop).epsilon(1e-9));
  }
}

TEST_CASE("p4d.24xlarge: the simulator's traffic per member, written out by hand", "[collective]") {
  // What each member sends per phase. Network bytes are inflated by 1/net_efficiency,
  // since the simulated NIC runs at its achieved rate.
  const InstanceType p4d = load_instance_type("p4d.24xlarge");
  const double S = 1e9;
  SECTION("ring all-reduce, 16 ranks on 2 nodes: one phase") {
    const CollectiveTraffic t = collective_traffic(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S,
                                                   span(16, 2, 8), p4d);
    REQUIRE(t.phase_count == 1);
    CHECK(t.phases[0].intra_bytes == Approx(2.0 * 15 / 16 * S));
    CHECK(t.phases[0].net_bytes == Approx(2.0 * 15 / 16 * S / 8 / kP4dRingEff));
    CHECK(t.latency == Approx(kSimpleBase + 2.0 * (14 * kRingHop + kNetHop)));
  }
  SECTION("hierarchical all-reduce, 4 per node on 4 nodes: NVSwitch, network, NVSwitch") {
    const CollectiveTraffic t = collective_traffic(CollectiveKind::all_reduce, CollectiveAlgorithm::hierarchical,
                                                   S, span(16, 4, 4), p4d);
    REQUIRE(t.phase_count == 3);
    CHECK(t.phases[0].intra_bytes == Approx(3.0 / 4 * S));
    CHECK(t.phases[0].net_bytes == 0);
    CHECK(t.phases[1].intra_bytes == 0);
    CHECK(t.phases[1].net_bytes == Approx(2 * 3.0 / 4 * S / 4 / kP4dRingEff));
    CHECK(t.phases[2].intra_bytes == Approx(3.0 / 4 * S));
    CHECK(t.latency == Approx(2 * (3 * kP4dIntraLat + 3 * kP4dNicLat)));
  }
  SECTION("all-to-all all-reduce: a reduce-scatter round and an all-gather round") {
    const CollectiveTraffic t = collective_traffic(CollectiveKind::all_reduce, CollectiveAlgorithm::all_to_all, S,
                                                   span(32, 4, 8), p4d);
    REQUIRE(t.phase_count == 2);
    for (int i = 0; i < 2; ++i) {
      CHECK(t.phases[i].intra_bytes == Approx(7.0 / 8 * S));
      CHECK(t.phases[i].net_bytes == Approx(3.0 / 4 * S / 8));
    }
    CHECK(t.latency == Approx(2 * (kP4dNicLat + kP4dIntraLat)));
  }
}

TEST_CASE("a small ring all-reduce across two p4de nodes takes what nccl-tests measured there", "[collective]") {
  // MB §4.2 (AWS-NCCL, 2x p4de.24xlarge, 16 ranks, all_reduce_perf): 8 B to 256 B take
  // 161-164 us, 1 KB 165 us. A ring of 8 bytes runs LL: 6.6 us, then 28 NVLink steps of
  // 0.6 + 0.2 us and 2 network steps of 2.7 + 67 us: 168.4 us. (Counting every one of the
  // 30 steps at the network's latency, as partune once did, gave 2.25 ms.)
  const InstanceType p4de = load_instance_type("p4de.24xlarge");
  const double t = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, 8, span(16, 2, 8), p4de).total();
  CHECK(t == Approx(6.6e-6 + 28 * 0.8e-6 + 2 * (2.7e-6 + 67e-6)));
  CHECK(t > 161e-6 * 0.8);
  CHECK(t < 165e-6 * 1.3);
}

// CollectiveAlgorithm::nccl: NCCL's tuner, the faster of its algorithms on idle links. For an
// all-reduce of S over 2 nodes x 8 on the test instance: a ring moves 2 (15/16) S / 8 through
// each member's 6.25 GB/s NIC share (37.5 ms a GB) and waits 2 (14 x 2 + 20) = 96 us; the
// tree moves S / 8 (20 ms a GB) and waits 2 (20 + 7 x 2) = 68 us: the tree, at every size.
// Inside a node and for the other collectives NCCL runs rings here.
TEST_CASE("nccl picks what NCCL's tuner would: the faster of ring and tree", "[collective][nccl]") {
  const InstanceType it = test_instance();
  const GroupSpan two_nodes = span(16, 2, 8), one_node = span(8, 1, 8);
  for (const double S : {1e3, 1e6, 1e9}) {
    INFO(S << " bytes");
    CHECK(resolved_algorithm(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, S, two_nodes, it) ==
          CollectiveAlgorithm::tree);
    const double nccl = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, S, two_nodes, it).total();
    CHECK(nccl == Approx(S / 8 / (kNodeNet / 8) + 2 * (kNicLat + 7 * kIntraLat)));
    CHECK(resolved_algorithm(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, S, one_node, it) ==
          CollectiveAlgorithm::ring);
    CHECK(resolved_algorithm(CollectiveKind::all_gather, CollectiveAlgorithm::nccl, S, two_nodes, it) ==
          CollectiveAlgorithm::ring);
  }
  // A named algorithm is kept.
  CHECK(resolved_algorithm(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, 1e9, two_nodes, it) ==
        CollectiveAlgorithm::ring);
}
