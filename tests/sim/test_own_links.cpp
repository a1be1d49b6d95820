// Collectives of a communicator that has its links to itself (inside one NVLink level,
// nothing else crossing its members' NVSwitch ports) are timed in closed form instead of
// run as flows (sim/src/own_links.cpp). The expectation is SimGrid running their flows:
// the same simulation with closed_form_collectives off.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

namespace {

Job job_with(const std::string& parallel, int nodes) {
  return parse_job("model: gpt3-2.7b\ncluster: {instance_type: p4d.24xlarge, nodes: " + std::to_string(nodes) + "}\n"
                   "training: {global_batch: 16, precision: fp16}\nparallel: {" + parallel + "}\n",
                   "own-links");
}

sim::SimResult simulate(const Job& job, bool closed_form, const std::vector<std::string>& slow = {}) {
  sim::SimOptions o;
  o.use_symmetry = false;
  o.closed_form_collectives = closed_form;
  for (const std::string& s : slow) o.slowdowns.push_back(sim::parse_slowdown(s));
  return sim::simulate(job, o);
}

void check_same_timeline(const sim::SimResult& a, const sim::SimResult& b) {
  CHECK(a.metrics.step_time == Approx(b.metrics.step_time).epsilon(1e-9));
  CHECK(a.exposed.tensor == Approx(b.exposed.tensor).epsilon(1e-9).margin(1e-12));
  CHECK(a.exposed.pipeline == Approx(b.exposed.pipeline).epsilon(1e-9).margin(1e-12));
  CHECK(a.exposed.data == Approx(b.exposed.data).epsilon(1e-9).margin(1e-12));
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (std::size_t i = 0; i < a.ranks.size(); ++i) {
    INFO("rank " << a.ranks[i].rank);
    CHECK(a.ranks[i].end_time == Approx(b.ranks[i].end_time).epsilon(1e-9));
    CHECK(a.ranks[i].peak_memory == Approx(b.ranks[i].peak_memory).epsilon(1e-9));
  }
}

}  // namespace

TEST_CASE("collectives on their own links take in closed form what their flows take", "[sim][own-links]") {
  struct Case {
    const char* parallel;
    std::vector<std::string> slow;
  };
  const Case cases[] = {
      // Tensor groups fill the nodes; stages and replicas are on other nodes.
      {"pipeline_parallel_degree: 2, tensor_parallel_degree: 8, microbatches: 4", {}},
      // The same with one slow GPU: its group's collectives start when it calls them.
      {"pipeline_parallel_degree: 2, tensor_parallel_degree: 8, microbatches: 4", {"rank=3:1.3"}},
      // Sequence parallelism: the backward's all-gather runs async beside the GEMM, which
      // it slows (compute_overlap); no stream runs it in closed form.
      {"pipeline_parallel_degree: 2, tensor_parallel_degree: 8, sequence_parallel: true, "
       "activation_checkpointing: full, microbatches: 4",
       {"node=1:1.2"}},
      // Full checkpointing with a slow GPU: a gradient's receive, its latency slept with the
      // recompute's kernels, and each compute waited out with the all-reduce after it
      // (RankProgramRunner::plan_fusions).
      {"pipeline_parallel_degree: 2, tensor_parallel_degree: 8, activation_checkpointing: full, microbatches: 4",
       {"rank=9:1.25"}},
      // Interleaved stages, the head on its own.
      {"pipeline_parallel_degree: 2, tensor_parallel_degree: 8, virtual_stages: 2, microbatches: 4", {}},
  };
  for (const Case& c : cases) {
    INFO(c.parallel);
    const Job job = job_with(c.parallel, 4);
    const sim::SimResult closed = simulate(job, true, c.slow), flows = simulate(job, false, c.slow);
    check_same_timeline(closed, flows);
    CHECK(closed.activities < flows.activities);  // the tensor groups' flows were not run
  }
}

TEST_CASE("communicators that share their NVSwitch ports keep their flows", "[sim][own-links]") {
  const char* cases[] = {
      // Two tensor groups and the data-parallel groups between them on each node.
      "tensor_parallel_degree: 4",
      // A stage's hop to the next crosses the NVSwitch beside the tensor collectives.
      "pipeline_parallel_degree: 2, tensor_parallel_degree: 4, microbatches: 4",
  };
  for (const char* parallel : cases) {
    INFO(parallel);
    const Job job = job_with(parallel, 2);
    const sim::SimResult closed = simulate(job, true), flows = simulate(job, false);
    check_same_timeline(closed, flows);
    CHECK(closed.activities == flows.activities);  // nothing timed in closed form
  }
}

TEST_CASE("every scenario job simulates to the same step with its collectives in closed form", "[sim][own-links]") {
  // The shipped jobs (folded, as `simulate` runs them): MoE, context parallelism, sharded
  // data parallelism, zero-bubble schedules, NVLink domains and p3dn's shared NICs among them.
  int jobs = 0;
  for (const auto& f : std::filesystem::directory_iterator(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs")) {
    if (f.path().extension() != ".yaml") continue;
    INFO(f.path().filename().string());
    const Job job = load_job(f.path().string());
    sim::SimOptions flows;
    flows.closed_form_collectives = false;
    const sim::SimResult a = sim::simulate(job), b = sim::simulate(job, flows);
    CHECK(a.metrics.step_time == Approx(b.metrics.step_time).epsilon(1e-9));
    CHECK(a.exposed.tensor == Approx(b.exposed.tensor).epsilon(1e-9).margin(1e-12));
    CHECK(a.activities <= b.activities);
    ++jobs;
  }
  CHECK(jobs >= 10);
}
