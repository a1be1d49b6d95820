// What-if sweeps (search/sweep.hpp): each point is exactly the job with its keys set, as
// `estimate` (or `search`) gives it; the axes' parsing and the product's order.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/search/sweep.hpp"
#include "sweep_jobs.hpp"

using namespace partune;
using namespace partune::search;

namespace {
const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/gpt-neox-20b-p4d-16.yaml";
// The shipped job sets parallel.microbatches (48).
const SweepJob kSweepJob = testing::file_sweep_job(kJob, true);
}  // namespace

TEST_CASE("sweep: axes parse, commas inside a flow value stay in it", "[search][sweep]") {
  const SweepAxis a = parse_axis("nodes=8,16,32");
  CHECK(a.key == "nodes");
  CHECK(a.values == std::vector<std::string>{"8", "16", "32"});
  const SweepAxis b = parse_axis("instance_type={base: p4d.24xlarge, gpu: {hbm_GiB: 80}},p5.48xlarge");
  CHECK(b.values == std::vector<std::string>{"{base: p4d.24xlarge, gpu: {hbm_GiB: 80}}", "p5.48xlarge"});
  CHECK_THROWS_AS(parse_axis("nodes"), std::invalid_argument);
  CHECK_THROWS_AS(parse_axis("nodes=8,,16"), std::invalid_argument);
  // A --vary of a key the file sweeps replaces the file's axis.
  const auto axes = sweep_axes({"nodes=8,16", "precision=fp16"}, {"nodes=32"});
  REQUIRE(axes.size() == 2);
  CHECK(axes[0].values == std::vector<std::string>{"32"});
  CHECK(sweep_size({parse_axis("a=1,2,3"), parse_axis("b=x,y")}) == 6);
}

TEST_CASE("sweep: every point is the estimate of the job with its keys set", "[search][sweep]") {
  SweepOptions o;
  o.axes = {parse_axis("nodes=8,16"), parse_axis("instance_type=p4d.24xlarge,p4de.24xlarge,p5.48xlarge")};
  o.threads = 2;
  const std::vector<SweepPoint> points = run_sweep(kSweepJob, o);
  REQUIRE(points.size() == 6);
  const char* nodes[] = {"8", "16"};
  const char* types[] = {"p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge"};
  for (int i = 0; i < 6; ++i) {
    const SweepPoint& p = points[i];
    INFO("point " << i);
    CHECK(p.index == i);
    // The last axis varies fastest.
    CHECK(p.values == std::vector<std::string>{nodes[i / 3], types[i % 3]});
    REQUIRE(p.status == PointStatus::fits);
    const Estimate e = estimate(load_job(kJob, {std::string("nodes=") + nodes[i / 3],
                                                std::string("instance_type=") + types[i % 3]}));
    CHECK(p.metrics.step_time == e.step_time);  // exactly: the same job, the same estimator
    CHECK(p.metrics.memory.total() == e.memory.total());
    CHECK(p.job.cluster.nodes == (i < 3 ? 8 : 16));
  }
  // Split over two "ranks": the shares are the points of those indices.
  o.stride = 2;
  o.offset = 1;
  const std::vector<SweepPoint> odd = run_sweep(kSweepJob, o);
  REQUIRE(odd.size() == 3);
  for (int k = 0; k < 3; ++k) CHECK(odd[k].metrics.step_time == points[2 * k + 1].metrics.step_time);
}

TEST_CASE("sweep: an inconsistent point is a row with its reason, a wrong key for every point is an error",
          "[search][sweep]") {
  SweepOptions o;
  o.axes = {parse_axis("tensor_parallel_degree=8,3")};
  const std::vector<SweepPoint> points = run_sweep(kSweepJob, o);
  REQUIRE(points.size() == 2);
  CHECK(points[0].status == PointStatus::fits);
  CHECK(points[1].status == PointStatus::invalid);
  CHECK_FALSE(points[1].has_metrics);
  CHECK(points[1].reason.find("parallel") != std::string::npos);
  o.axes = {parse_axis("tensor_parallel_degre=8,4")};
  CHECK_THROWS_AS(run_sweep(kSweepJob, o), ScenarioError);
}

TEST_CASE("sweep --search: each point is what the search finds for it", "[search][sweep]") {
  SweepOptions o;
  o.axes = {parse_axis("nodes=8,16")};
  o.search = true;
  o.search_options.top_k = 4;  // simulated, as partune search does (in forked children)
  const std::vector<SweepPoint> points = run_sweep(kSweepJob, o);
  REQUIRE(points.size() == 2);
  for (int i = 0; i < 2; ++i) {
    const Job base = load_job(kJob, {i == 0 ? "nodes=8" : "nodes=16"});
    SearchSpace space;
    const SearchReport r = run_search(base, space, o.search_options);
    REQUIRE(points[i].status == PointStatus::fits);
    CHECK(describe(points[i].job) == describe(r.ranked.front().job));
    CHECK(points[i].simulated == r.ranked.front().simulated);
    CHECK(points[i].metrics.step_time == r.ranked.front().simulation.step_time);
  }
}
