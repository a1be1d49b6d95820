// A collective stack measured against its own links (issue 29, the ranking suite): Gloo on
// the local host reaches a share of its send/recv rate that differs by algorithm
// (collectives.*.intra_efficiency), and has no reduce-scatter, so the backend all-reduces
// (collectives.*.reduce_scatter_as_all_reduce). Expectations are the two-rank formulas
// written out by hand (a 2-rank ring all-reduce moves S bytes a member, 2 hops; an
// all-gather or reduce-scatter S/2, 1 hop).
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;

namespace {

const std::string kOrigin = "gloo.yaml";

// local-cpu with round links: 2 GB/s and 10 us between the two ranks; 500 us a call.
std::string gloo_job(const std::string& collectives) {
  return "kind: job\nmodel: gpt2-small\n"
         "cluster:\n  nodes: 1\n  instance_type:\n    base: local-cpu\n"
         "    intra_node: {bw_GBps: 2, latency_us: 10, efficiency: 1}\n"
         "    collectives: " + collectives + "\n"
         "training: {global_batch: 8, precision: fp32}\n";
}

const GroupSpan kTwoRanks{2, 1, 2};  // 2 members, 1 node, 2 on it
constexpr double S = 8e6;            // bytes
constexpr double us = 1e-6;

}  // namespace

TEST_CASE("an algorithm's intra-node efficiency slows its intra-node bytes only", "[collectives][gloo]") {
  const Job j = parse_job(gloo_job("{all_to_all: {intra_efficiency: 0.25, launch_us: 500}}"), kOrigin);
  const InstanceType& it = j.cluster.instance;
  // all-gather, all_to_all algorithm: S/2 = 4 MB at 2 GB/s x 0.25 = 8 ms; one hop + the call.
  const CollectiveCost g = collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::all_to_all, S, kTwoRanks, it);
  CHECK(g.bandwidth_time == Approx(4e6 / 0.5e9));
  CHECK(g.latency_time == Approx(10 * us + 500 * us));
  // The ring keeps the fabric's whole rate: the same all-gather in 2 ms.
  const CollectiveCost r = collective_cost(CollectiveKind::all_gather, CollectiveAlgorithm::ring, S, kTwoRanks, it);
  CHECK(r.bandwidth_time == Approx(4e6 / 2e9));
  // The simulator's traffic carries the same slow-down as bytes: 4 MB / 0.25 on the link.
  const CollectiveTraffic t = collective_traffic(CollectiveKind::all_gather, CollectiveAlgorithm::all_to_all, S,
                                                 kTwoRanks, it);
  REQUIRE(t.phase_count == 1);
  CHECK(t.phases[0].intra_bytes == Approx(16e6));
  // Pipeline send/recv is the link itself: no algorithm's efficiency.
  const CollectiveCost p = collective_cost(CollectiveKind::send_recv, CollectiveAlgorithm::all_to_all, S, kTwoRanks, it);
  CHECK(p.bandwidth_time == Approx(S / 2e9));
}

TEST_CASE("a stack without reduce-scatter pays an all-reduce for it", "[collectives][gloo]") {
  const Job plain = parse_job(gloo_job("{ring: {reduce_scatter_as_all_reduce: false}}"), kOrigin);
  const Job gloo = parse_job(gloo_job("{ring: {reduce_scatter_as_all_reduce: true, intra_efficiency: 0.5}}"), kOrigin);
  // Plain ring reduce-scatter: S/2 at 2 GB/s = 2 ms, 1 hop.
  const CollectiveCost a = collective_cost(CollectiveKind::reduce_scatter, CollectiveAlgorithm::ring, S, kTwoRanks,
                                           plain.cluster.instance);
  CHECK(a.bandwidth_time == Approx(4e6 / 2e9));
  CHECK(a.latency_time == Approx(10 * us));
  // As an all-reduce: S at 2 GB/s x 0.5 = 8 ms, 2 hops; exactly the all-reduce's cost.
  const CollectiveCost b = collective_cost(CollectiveKind::reduce_scatter, CollectiveAlgorithm::ring, S, kTwoRanks,
                                           gloo.cluster.instance);
  CHECK(b.bandwidth_time == Approx(8e6 / 1e9));
  CHECK(b.latency_time == Approx(20 * us));
  const CollectiveCost ar = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, kTwoRanks,
                                            gloo.cluster.instance);
  CHECK(ar.bandwidth_time == Approx(b.bandwidth_time));
  CHECK(ar.latency_time == Approx(b.latency_time));
}

TEST_CASE("the shipped local profile all-reduces for reduce-scatter, GPU profiles do not", "[collectives][gloo]") {
  const Job local = parse_job("kind: job\nmodel: gpt2-small\ncluster: {instance_type: local-cpu, nodes: 1}\n"
                              "training: {global_batch: 8, precision: fp32}\n", kOrigin);
  CHECK(local.cluster.instance.ring.reduce_scatter_as_all_reduce);
  CHECK(local.cluster.instance.all_to_all.reduce_scatter_as_all_reduce);
  const Job p4d = parse_job("kind: job\nmodel: gpt2-small\ncluster: {instance_type: p4d.24xlarge, nodes: 2}\n"
                            "training: {global_batch: 64}\n", kOrigin);
  CHECK_FALSE(p4d.cluster.instance.ring.reduce_scatter_as_all_reduce);
  CHECK(p4d.cluster.instance.ring.intra_efficiency == 1.0);
}

TEST_CASE("the new collective keys are written back and read again", "[collectives][gloo]") {
  const Job j = parse_job(gloo_job("{ring: {intra_efficiency: 0.4, reduce_scatter_as_all_reduce: true}}"), kOrigin);
  const Job again = parse_job(job_yaml(j, "a test"), kOrigin);
  CHECK(again.cluster.instance.ring.intra_efficiency == Approx(0.4));
  CHECK(again.cluster.instance.ring.reduce_scatter_as_all_reduce);
  CHECK(again.cluster.instance.tree.reduce_scatter_as_all_reduce);  // local-cpu's own
}

TEST_CASE("an intra-node efficiency not in the range 0 < e <= 1 is refused at its key", "[bad-input][collectives][gloo]") {
  for (const char* bad : {"0", "1.5", "-0.1"}) {
    try {
      parse_job(gloo_job(std::string("{all_to_all: {intra_efficiency: ") + bad + "}}"), kOrigin);
      FAIL("accepted intra_efficiency " << bad);
    } catch (const ScenarioError& e) {
      CHECK(e.file() == kOrigin);
      CHECK_THAT(e.key(), Catch::Contains("intra_efficiency"));
    }
  }
}
