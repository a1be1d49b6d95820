// cluster.collective_stack (issue 29): an instance file's collective_stacks describe older
// NCCL/network-plugin releases measured on the same hardware; a cluster picks one by name,
// its profiles laid over the file's own (today's) collectives. Expectations are the cited
// measurements written out by hand from scenarios/clusters/p4d.24xlarge.yaml's comments.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "scenario_errors.hpp"

using namespace partune;
using partune::testing::expect_scenario_error;

namespace {

const std::string kOrigin = "stack.yaml";

std::string p4d_job(const std::string& cluster_extra) {
  return "kind: job\nmodel: gpt2-small\ncluster: {instance_type: p4d.24xlarge, nodes: 2" + cluster_extra +
         "}\ntraining: {global_batch: 64}\n";
}

ScenarioError refused(const std::string& text) {
  return expect_scenario_error([&] { parse_job(text, kOrigin); });
}

}  // namespace

TEST_CASE("p4d's collectives are today's stack unless the cluster names the 2022 one", "[collectives][stack]") {
  const Job today = parse_job(p4d_job(""), kOrigin);
  // 8 channels of one thread block on 108 SMs; the 2-node measured rate (net_efficiency 1).
  CHECK(today.cluster.instance.collective_stack.empty());
  CHECK(today.cluster.instance.ring.compute_overlap == Approx(100.0 / 108.0).epsilon(1e-12));
  CHECK(today.cluster.instance.ring.net_efficiency == 1.0);

  const Job old = parse_job(p4d_job(", collective_stack: nccl-2022"), kOrigin);
  CHECK(old.cluster.instance.collective_stack == "nccl-2022");
  CHECK(old.cluster.instance.ring.net_efficiency == Approx(0.55));  // nccl#527, 4 nodes
  // Its kernels hold the same 8 channels: the overlap is the file's own (issue 49 removed the
  // 0.2 once assumed for this stack).
  CHECK(old.cluster.instance.ring.compute_overlap == Approx(100.0 / 108.0).epsilon(1e-12));
  CHECK(old.cluster.instance.tree.compute_overlap == Approx(100.0 / 108.0).epsilon(1e-12));
  // What the stack does not restate stays the file's own.
  CHECK(old.cluster.instance.tree.net_efficiency == 1.0);
  CHECK(old.cluster.instance.all_to_all.compute_overlap == Approx(0.5));

  // The same 1 GiB ring all-reduce over 2 whole nodes: the network part takes 1 / 0.55 as
  // long on the 2022 stack; the latency is the same.
  const GroupSpan two_nodes{16, 2, 8};
  const CollectiveCost a = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, 1 << 30,
                                           two_nodes, today.cluster.instance, 1.0);
  const CollectiveCost b = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, 1 << 30,
                                           two_nodes, old.cluster.instance, 1.0);
  CHECK(b.bandwidth_time == Approx(a.bandwidth_time / 0.55));
  CHECK(b.latency_time == Approx(a.latency_time));
}

TEST_CASE("a collective stack can be set from the command line and is written back", "[collectives][stack]") {
  const Job set = parse_job(p4d_job(""), kOrigin, {"collective_stack=nccl-2022"});
  CHECK(set.cluster.instance.ring.net_efficiency == Approx(0.55));
  const std::string yaml = job_yaml(set, "a test");
  CHECK(yaml.find("collective_stack: nccl-2022") != std::string::npos);
  const Job again = parse_job(yaml, kOrigin);
  CHECK(again.cluster.instance.ring.net_efficiency == Approx(0.55));
  CHECK(again.cluster.instance.collective_stack == "nccl-2022");
}

TEST_CASE("an unknown collective stack is refused at the cluster's key, naming those there are",
          "[bad-input][collectives][stack]") {
  const ScenarioError e = refused(p4d_job(", collective_stack: nccl-2019"));
  CHECK(e.file() == kOrigin);
  CHECK(e.key() == "cluster.collective_stack");
  CHECK_THAT(e.reason(), Catch::Contains("'nccl-2019'") && Catch::Contains("nccl-2022"));
  const ScenarioError none = refused(
      "kind: job\nmodel: gpt2-small\ncluster: {instance_type: p5.48xlarge, nodes: 1, collective_stack: old}\n"
      "training: {global_batch: 64}\n");
  CHECK(none.key() == "cluster.collective_stack");
  CHECK_THAT(none.reason(), Catch::Contains("it has none"));
  // A stack's keys are checked as collectives are.
  const ScenarioError key = refused(
      "kind: job\nmodel: gpt2-small\ncluster:\n  nodes: 1\n  collective_stack: s\n"
      "  instance_type: {base: p4d.24xlarge, collective_stacks: {s: {ring: {speed: 2}}}}\n"
      "training: {global_batch: 64}\n");
  CHECK(key.key() == "cluster.instance_type.collective_stacks.s.ring.speed");
}
