#include <catch2/catch.hpp>

#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "partune/costmodel/placement.hpp"

using namespace partune;

namespace {

const char* kAllOrders[] = {"DPT", "DTP", "PDT", "PTD", "TDP", "TPD"};

// The stride each axis must have under SMP's rule (right-most letter fastest), computed
// by hand from the order string: independent of Placement's own loop.
int expected_stride(const std::string& order, char axis, int d, int p, int t) {
  auto deg = [&](char c) { return c == 'D' ? d : c == 'P' ? p : t; };
  int stride = 1;
  for (size_t i = order.find(axis) + 1; i < order.size(); ++i) stride *= deg(order[i]);
  return stride;
}

}  // namespace

TEST_CASE("rank <-> coordinates is a bijection for every axis order", "[placement]") {
  const auto [d, p, t] = GENERATE(std::make_tuple(2, 3, 4), std::make_tuple(2, 2, 2),
                                  std::make_tuple(3, 1, 5));
  for (const char* order : kAllOrders) {
    INFO("order " << order << " dp " << d << " pp " << p << " tp " << t);
    const Placement pl(PlacementOrder::parse(order), d, p, t);
    REQUIRE(pl.world_size() == d * p * t);
    std::set<std::tuple<int, int, int>> seen;
    for (int r = 0; r < pl.world_size(); ++r) {
      const RankCoords c = pl.coords(r);
      CHECK(c.data >= 0);
      CHECK(c.data < d);
      CHECK(c.pipeline >= 0);
      CHECK(c.pipeline < p);
      CHECK(c.tensor >= 0);
      CHECK(c.tensor < t);
      CHECK(pl.rank(c) == r);
      seen.emplace(c.data, c.pipeline, c.tensor);
      // Closed form: rank = sum of coordinate * stride, strides from the order string.
      CHECK(r == c.data * expected_stride(order, 'D', d, p, t) +
                     c.pipeline * expected_stride(order, 'P', d, p, t) +
                     c.tensor * expected_stride(order, 'T', d, p, t));
    }
    CHECK(static_cast<int>(seen.size()) == d * p * t);
    // And every coordinate triple maps back into range.
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < p; ++b)
        for (int c = 0; c < t; ++c) {
          const int r = pl.rank({a, b, c});
          CHECK(r >= 0);
          CHECK(r < d * p * t);
          CHECK(pl.coords(r) == RankCoords{a, b, c});
        }
  }
}

TEST_CASE("the right-most letter varies fastest", "[placement]") {
  // (dp 2, pp 3, tp 4): rank 1 moves one step along the last letter's axis.
  SECTION("DPT") {
    const Placement pl(PlacementOrder::parse("DPT"), 2, 3, 4);
    CHECK(pl.coords(1) == RankCoords{0, 0, 1});
    CHECK(pl.coords(4) == RankCoords{0, 1, 0});
    CHECK(pl.coords(12) == RankCoords{1, 0, 0});
    CHECK(pl.coords(23) == RankCoords{1, 2, 3});
  }
  SECTION("TPD") {
    const Placement pl(PlacementOrder::parse("TPD"), 2, 3, 4);
    CHECK(pl.coords(1) == RankCoords{1, 0, 0});
    CHECK(pl.coords(2) == RankCoords{0, 1, 0});
    CHECK(pl.coords(6) == RankCoords{0, 0, 1});
    CHECK(pl.coords(23) == RankCoords{1, 2, 3});
  }
  SECTION("PDT") {
    const Placement pl(PlacementOrder::parse("PDT"), 2, 3, 4);
    CHECK(pl.coords(1) == RankCoords{0, 0, 1});
    CHECK(pl.coords(4) == RankCoords{1, 0, 0});
    CHECK(pl.coords(8) == RankCoords{0, 1, 0});
  }
}

TEST_CASE("SMP's published 8-device DPT example", "[placement]") {
  // SageMaker model parallel docs, placement_strategy "cluster" with dp = pp = tp = 2.
  const int rdp[] = {0, 0, 0, 0, 1, 1, 1, 1};
  const int pp[] = {0, 0, 1, 1, 0, 0, 1, 1};
  const int tp[] = {0, 1, 0, 1, 0, 1, 0, 1};
  for (const char* order : {"DPT", "cluster"}) {
    const Placement pl(PlacementOrder::parse(order), 2, 2, 2);
    for (int r = 0; r < 8; ++r) {
      INFO(order << " rank " << r);
      CHECK(pl.coords(r).data == rdp[r]);
      CHECK(pl.coords(r).pipeline == pp[r]);
      CHECK(pl.coords(r).tensor == tp[r]);
    }
  }
}

TEST_CASE("named strategies are the documented orders", "[placement]") {
  const PlacementOrder cluster = PlacementOrder::parse("cluster"), spread = PlacementOrder::parse("spread");
  CHECK(cluster.name() == "DPT");
  CHECK(spread.name() == "TPD");
  CHECK(cluster == PlacementOrder::parse("DPT"));
  CHECK(spread == PlacementOrder::parse("TPD"));
  CHECK(PlacementOrder() == cluster);  // the job key's default
  CHECK(cluster.smp_name() == "cluster");
  CHECK(spread.smp_name() == "spread");
  CHECK(PlacementOrder::parse("PDT").smp_name() == "PDT");
  const Placement c(cluster, 2, 3, 4), dpt(PlacementOrder::parse("DPT"), 2, 3, 4);
  const Placement s(spread, 2, 3, 4), tpd(PlacementOrder::parse("TPD"), 2, 3, 4);
  CHECK(c.order() == cluster);
  CHECK(s.order().name() == "TPD");
  for (int r = 0; r < 24; ++r) {
    CHECK(c.coords(r) == dpt.coords(r));
    CHECK(s.coords(r) == tpd.coords(r));
  }
}

TEST_CASE("each permutation of D, P, T parses to its axes, slowest first", "[placement]") {
  struct Case {
    const char* text;
    Axis slowest, middle, fastest;
  };
  const Case cases[] = {{"DPT", Axis::data, Axis::pipeline, Axis::tensor},
                        {"DTP", Axis::data, Axis::tensor, Axis::pipeline},
                        {"PDT", Axis::pipeline, Axis::data, Axis::tensor},
                        {"PTD", Axis::pipeline, Axis::tensor, Axis::data},
                        {"TDP", Axis::tensor, Axis::data, Axis::pipeline},
                        {"TPD", Axis::tensor, Axis::pipeline, Axis::data}};
  for (const Case& k : cases) {
    INFO(k.text);
    const PlacementOrder o = PlacementOrder::parse(k.text);
    CHECK(o.axis(0) == k.slowest);
    CHECK(o.axis(1) == k.middle);
    CHECK(o.axis(2) == k.fastest);
    CHECK(o.name() == k.text);
    CHECK(PlacementOrder::parse(o.name()) == o);
  }
  SECTION("the six are distinct and all() lists them in the order of their names") {
    const auto& all = PlacementOrder::all();
    for (int i = 0; i < 6; ++i) {
      CHECK(all[i].name() == kAllOrders[i]);
      for (int j = 0; j < 6; ++j) CHECK((all[i] == all[j]) == (i == j));
    }
  }
}

TEST_CASE("placement letters may be in any case, SMP's names only in lower case", "[placement]") {
  CHECK(PlacementOrder::parse("dpt") == PlacementOrder::parse("DPT"));
  CHECK(PlacementOrder::parse("tPd") == PlacementOrder::parse("TPD"));
  CHECK(PlacementOrder::parse("pdT").name() == "PDT");
  for (const char* bad : {"Cluster", "SPREAD"}) {
    INFO(bad);
    CHECK_THROWS_AS(PlacementOrder::parse(bad), std::invalid_argument);
  }
}

TEST_CASE("cluster placement keeps every tensor-parallel group inside one node", "[placement]") {
  // GPT-3 175B on 120 p4d: pp 8, tp 8, dp 15, 8 GPUs per node.
  const Placement pl(PlacementOrder::parse("cluster"), 15, 8, 8);
  REQUIRE(pl.world_size() == 960);
  std::set<int> first_members;
  for (int r = 0; r < 960; ++r) {
    const std::vector<int> g = pl.group(r, Axis::tensor);
    REQUIRE(g.size() == 8);
    for (int member : g) CHECK(member / 8 == r / 8);
    // Members differ only in the tensor coordinate, in axis order.
    for (int i = 0; i < 8; ++i) {
      CHECK(pl.coords(g[i]).tensor == i);
      CHECK(pl.coords(g[i]).data == pl.coords(r).data);
      CHECK(pl.coords(g[i]).pipeline == pl.coords(r).pipeline);
    }
    first_members.insert(g[0]);
  }
  CHECK(first_members.size() == 120);  // 120 distinct groups, one per node
  // Pipeline neighbours sit on different nodes; data-parallel replicas too.
  for (int member : pl.group(0, Axis::pipeline)) CHECK(member % 8 == 0);
  CHECK(pl.group(0, Axis::pipeline) == std::vector<int>{0, 8, 16, 24, 32, 40, 48, 56});
  CHECK(pl.group(5, Axis::data).size() == 15);
  CHECK(pl.group(5, Axis::data)[14] == 5 + 14 * 64);

  SECTION("spread puts a tensor-parallel group on 8 different nodes") {
    const Placement sp(PlacementOrder::parse("spread"), 15, 8, 8);
    std::set<int> nodes;
    for (int member : sp.group(0, Axis::tensor)) nodes.insert(member / 8);
    CHECK(nodes.size() == 8);
  }
}

TEST_CASE("group_span counts nodes and ranks per node", "[placement]") {
  auto span_is = [](const GroupSpan& s, int size, int nodes, int per_node) {
    INFO("span {" << s.size << ", " << s.nodes << ", " << s.per_node << "}");
    CHECK(s.size == size);
    CHECK(s.nodes == nodes);
    CHECK(s.per_node == per_node);
  };
  SECTION("DPT, dp 4 pp 2 tp 4 on 32 GPUs (strides T 1, P 4, D 8)") {
    const Placement pl(PlacementOrder::parse("DPT"), 4, 2, 4);
    span_is(group_span(pl, Axis::tensor, 8), 4, 1, 4);    // ranks 0-3
    span_is(group_span(pl, Axis::pipeline, 8), 2, 1, 2);  // ranks 0, 4
    span_is(group_span(pl, Axis::data, 8), 4, 4, 1);      // ranks 0, 8, 16, 24
  }
  SECTION("TPD, dp 4 pp 2 tp 4 on 32 GPUs (strides D 1, P 4, T 8)") {
    const Placement pl(PlacementOrder::parse("TPD"), 4, 2, 4);
    span_is(group_span(pl, Axis::data, 8), 4, 1, 4);
    span_is(group_span(pl, Axis::pipeline, 8), 2, 1, 2);
    span_is(group_span(pl, Axis::tensor, 8), 4, 4, 1);
  }
  SECTION("DTP, dp 2 tp 8 pp 2 on 32 GPUs (strides P 1, T 2, D 16)") {
    const Placement pl(PlacementOrder::parse("DTP"), 2, 2, 8);
    span_is(group_span(pl, Axis::pipeline, 8), 2, 1, 2);
    span_is(group_span(pl, Axis::tensor, 8), 8, 2, 4);    // ranks 0,2,..,14
    span_is(group_span(pl, Axis::data, 8), 2, 2, 1);      // ranks 0, 16
  }
  SECTION("pure data parallel over 4 nodes") {
    const Placement pl(PlacementOrder::parse("cluster"), 32, 1, 1);
    span_is(group_span(pl, Axis::data, 8), 32, 4, 8);
    span_is(group_span(pl, Axis::tensor, 8), 1, 1, 1);
    SECTION("sharded subgroups of consecutive replicas") {
      span_is(subgroup_span(pl, Axis::data, 4, 8), 4, 1, 4);
      span_is(subgroup_span(pl, Axis::data, 8, 8), 8, 1, 8);
      span_is(subgroup_span(pl, Axis::data, 16, 8), 16, 2, 8);
    }
  }
  SECTION("GPT-3 layout pp 8 tp 8 dp 15, cluster") {
    const Placement pl(PlacementOrder::parse("cluster"), 15, 8, 8);
    span_is(group_span(pl, Axis::tensor, 8), 8, 1, 8);
    span_is(group_span(pl, Axis::pipeline, 8), 8, 8, 1);
    span_is(group_span(pl, Axis::data, 8), 15, 15, 1);
  }
}

TEST_CASE("invalid placement strings throw std::invalid_argument", "[placement]") {
  for (const char* bad : {"DPX", "DDP", "DD T", "DDT", "DP", "DPTT", "", " DPT", "DPT ", "clusters", "D-P-T"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(PlacementOrder::parse(bad), std::invalid_argument);
  }
  SECTION("the message names the bad string and the choices") {
    CHECK_THROWS_WITH(PlacementOrder::parse("DPX"),
                      "'DPX' is not a placement: use cluster, spread or a permutation of D, P, T");
  }
}
