// NCCL's tuning model (nccl_tuner.hpp) over the instance files' measured fabrics: each
// expectation is NCCL 2.30's constants (MB26 §2.1) and the file's numbers written out by
// hand, and where a measurement exists, the measurement (microbench.md / microbench-2026.md).
#include <catch2/catch.hpp>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;

namespace {
GroupSpan span(int size, int nodes, int per_node) { return GroupSpan{size, nodes, per_node}; }
constexpr double GiB = 1024.0 * 1024 * 1024;
}  // namespace

TEST_CASE("a small all-reduce across two p5 nodes runs NCCL's LL tree: 70 us, as measured", "[nccl]") {
  // MB §4.3: 2x p5 all_reduce of 8 B to 1 KB takes 65-75 us. LL tree: base 6.8 us, then each
  // way 7 NVLink steps of 0.6 + 0.76 us and one network step of 5.0 + 17 us.
  const InstanceType p5 = load_instance_type("p5.48xlarge");
  const GroupSpan two = span(16, 2, 8);
  CHECK(resolved_algorithm(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, 8, two, p5) ==
        CollectiveAlgorithm::tree);
  const CollectivePhases ph = collective_phases(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, 8, two, p5);
  CHECK(ph.protocol == NcclProtocol::ll);
  const double t = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, 8, two, p5).total();
  CHECK(t * 1e6 == Approx(6.8 + 2 * (7 * (0.6 + 0.76) + 5.0 + 17)));
  CHECK(t > 65e-6);
  CHECK(t < 75e-6);
}

TEST_CASE("one p5 node's large all-reduce runs NVLS at its measured rate", "[nccl]") {
  // MB §4.3 AZ-H100: NVLS all_reduce of 8 GiB over 8 H100s, busbw 478.87 GB/s = 31391 us.
  // NVLS: S / (450 GB/s x 0.608) and one NVLS step of 25 + 0.76 us; a ring would move
  // 2 x 7/8 S at 450 x 0.81.
  const InstanceType p5 = load_instance_type("p5.48xlarge");
  const GroupSpan node = span(8, 1, 8);
  const double S = 8 * GiB;
  CHECK(resolved_algorithm(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, S, node, p5) ==
        CollectiveAlgorithm::nvls);
  const double t = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, S, node, p5).total();
  CHECK(t == Approx(S / (450e9 * 0.608) + (25 + 0.76) * 1e-6));
  CHECK(t == Approx(31391e-6).epsilon(0.02));
  // NVLS is an all-reduce's: an all-gather stays a ring; and two nodes have no NVLS here.
  CHECK(resolved_algorithm(CollectiveKind::all_gather, CollectiveAlgorithm::nccl, S, node, p5) ==
        CollectiveAlgorithm::ring);
  CHECK(collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::nvls, S, span(16, 2, 8), p5).total() ==
        collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, S, span(16, 2, 8), p5).total());
}

TEST_CASE("Blackwell's tree caps keep NCCL's ring at four p6-b200 nodes and its tree at two", "[nccl]") {
  // p6-b200: 8 x 400 Gb/s x 0.955 a node; 16 channels across nodes. A tree's bus bandwidth is
  // capped at 16 x 42.8 GB/s (2 nodes) and 16 x 24 GB/s (4 nodes) (MB26 §2.1); NCCL counts a
  // tree's bus bytes as twice the buffer. MB26 §2.2: 4 nodes, 16 GiB, busbw 381.8 (a ring's
  // reach); CW-92: 2 x 8 B200 (InfiniBand) 8 GiB 690.07 (a tree's).
  const InstanceType p6 = load_instance_type("p6-b200.48xlarge");
  const double S16 = 16 * GiB, S8 = 8 * GiB;
  const GroupSpan four = span(32, 4, 8), two = span(16, 2, 8);
  CHECK(resolved_algorithm(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, S16, four, p6) ==
        CollectiveAlgorithm::ring);
  const double ring4 = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, S16, four, p6).total();
  CHECK(ring4 == Approx(2 * 31.0 / 32 * S16 / (400e9 * 0.955) + (8.4 + 2 * (28 * (3.4 + 0.87) + 3 * (14 + 6.6))) * 1e-6));
  CHECK(ring4 == Approx(87182e-6).epsilon(0.02));
  CHECK(resolved_algorithm(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, S8, two, p6) ==
        CollectiveAlgorithm::tree);
  const double tree2 = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::nccl, S8, two, p6).total();
  CHECK(tree2 == Approx(2 * S8 / (16 * 42.8e9) + (8.4 + 2 * (7 * (4.0 + 0.87) + 14 + 6.6)) * 1e-6));
  // 8% slower than CoreWeave's InfiniBand nodes (same GPUs, 3.2 Tb/s a node over
  // InfiniBand, not EFA: docs/collectives.md), within 3% of AWS's "~654 GB/s" EFA peak (MB26 §2.3, AWSDAI-1120).
  CHECK(tree2 == Approx(2 * 15.0 / 16 * S8 / 690.07e9).epsilon(0.10));
  CHECK(2 * 15.0 / 16 * S8 / tree2 == Approx(654e9).epsilon(0.03));
}

TEST_CASE("LL runs at half the rate, capped at NCCL's llMaxBw", "[nccl]") {
  // One p5 node, a 1 GB ring all-reduce forced to LL: half of 450 x 0.81 is 182 GB/s, above
  // Hopper's one-node llMaxBw of 141 GB/s: 2 x 7/8 x 1e9 / 141 GB/s, base 6.6 us and 14
  // steps of 0.6 + 0.76 us.
  const Job job = parse_job(
      "model: gpt3-2.7b\ncluster: {instance_type: p5.48xlarge, nodes: 1, nccl_protocol: ll}\n"
      "training: {global_batch: 8}\n",
      "ll.yaml");
  const InstanceType& inst = job.cluster.instance;
  CHECK(inst.nccl.protocol == NcclProtocol::ll);
  const double t = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, 1e9, span(8, 1, 8), inst).total();
  CHECK(t == Approx(1.75e9 / 141e9 + (6.6 + 14 * 1.36) * 1e-6));
  // NVLS runs Simple only: NCCL_PROTO=LL leaves it Simple.
  CHECK(collective_phases(CollectiveKind::all_reduce, CollectiveAlgorithm::nvls, 1e9, span(8, 1, 8), inst).protocol ==
        NcclProtocol::simple);
}

TEST_CASE("cluster.nccl_protocol: NCCL_PROTO as a job key, read, written back and checked", "[nccl][scenario]") {
  const std::string base = "model: gpt3-2.7b\ntraining: {global_batch: 8}\ncluster: {instance_type: p5.48xlarge, nodes: 1";
  const Job simple = parse_job(base + ", nccl_protocol: simple}\n", "simple.yaml");
  const Job automatic = parse_job(base + "}\n", "auto.yaml");
  // 8 bytes on one node: Simple waits 8.4 us and 14 steps of 3.4 + 0.76 us; left to the
  // tuner, LL: 6.6 us and 14 of 0.6 + 0.76.
  const GroupSpan node = span(8, 1, 8);
  CHECK(collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, 8, node, simple.cluster.instance).total() *
            1e6 ==
        Approx(8.4 + 14 * 4.16));
  CHECK(collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, 8, node, automatic.cluster.instance)
                .total() *
            1e6 ==
        Approx(6.6 + 14 * 1.36));
  CHECK(parse_job(job_yaml(simple, "again"), "again.yaml").cluster.instance.nccl.protocol == NcclProtocol::simple);
  CHECK(parse_job(job_yaml(automatic, "again"), "again.yaml").cluster.instance.nccl.protocol == NcclProtocol::automatic);
  try {
    parse_job(base + ", nccl_protocol: ll64}\n", "bad.yaml");
    FAIL("an unknown protocol was accepted");
  } catch (const ScenarioError& e) {
    const std::string what = e.what();
    CHECK(what.find("bad.yaml") != std::string::npos);
    CHECK(what.find("cluster.nccl_protocol") != std::string::npos);
    CHECK(what.find("ll128") != std::string::npos);  // the choices
  }
  try {
    parse_job("model: gpt3-2.7b\ntraining: {global_batch: 8}\ncluster: {instance_type: local-cpu, nodes: 1, "
              "nccl_protocol: simple}\n",
              "gloo.yaml");
    FAIL("a protocol on an instance without NCCL was accepted");
  } catch (const ScenarioError& e) {
    CHECK(std::string(e.what()).find("no NCCL tables") != std::string::npos);
  }
}
