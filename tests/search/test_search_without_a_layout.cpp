// Issue 53 item 1: search and sweep take a job as model + cluster + batch. A job whose
// parallel layout is not legal (no parallel: section: data parallel over every GPU) loads
// for them under JobRules::settings, every other rule as strict; estimate's load refuses it.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/search/request.hpp"
#include "partune/search/sweep.hpp"
#include "sweep_jobs.hpp"

using namespace partune;
using namespace partune::search;

namespace {

const std::string kData = std::string(PARTUNE_SOURCE_DIR) + "/tests/cli/data/";

std::string refusal(const std::string& path, JobRules rules) {
  try {
    load_job(path, {}, rules);
  } catch (const ScenarioError& e) {
    return e.key() + ": " + e.reason();
  }
  return "";
}

}  // namespace

TEST_CASE("search: a job without a layout loads as a starting point, estimate's load refuses it", "[search]") {
  const std::string llama = kData + "llama-3-70b-128k-no-layout.yaml", qwen = kData + "qwen3-30b-nvl72-no-layout.yaml";
  CHECK(refusal(llama, JobRules::every).find("training.global_batch: 16 is not divisible by data-parallel degree 128") == 0);
  CHECK(refusal(qwen, JobRules::every).find("training.global_batch: 1024 is not divisible by data-parallel degree 72") == 0);
  CHECK(refusal(llama, JobRules::settings).empty());
  CHECK(refusal(qwen, JobRules::settings).empty());
  // Every other rule stays: a bad key, a bad value, a setting no layout mends.
  CHECK_THROWS_AS(load_job(llama, {"tensor_paralel_degree=8"}, JobRules::settings), ScenarioError);
  CHECK_THROWS_AS(load_job(llama, {"tensor_parallel_degree=eight"}, JobRules::settings), ScenarioError);
  CHECK_THROWS_AS(load_job(llama, {"global_batch=0"}, JobRules::settings), ScenarioError);
  try {
    load_job(llama, {"fp8_recipe=current"}, JobRules::settings);
    FAIL("fp8_recipe current with bf16 loaded");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "training.fp8_recipe");
  }
  // A given layout, however illegal, is a starting point too.
  CHECK(refusal(qwen, JobRules::every).size() > 0);
  CHECK_NOTHROW(load_job(qwen, {"tensor_parallel_degree=3", "microbatches=7"}, JobRules::settings));
}

TEST_CASE("search: Qwen3-30B on an NVL72 rack with 1024 sequences finds a plan (uneven pipeline stages)", "[search]") {
  const std::string qwen = kData + "qwen3-30b-nvl72-no-layout.yaml";
  const Job base = load_job(qwen, {}, JobRules::settings);
  SearchRequest request;
  request.estimator_only = true;
  const SearchReport r = run_search(base, qwen, request);
  REQUIRE_FALSE(r.ranked.empty());
  const Job& best = r.ranked.front().job;
  CHECK_FALSE(check_job(best));
  // 1024 = 2^10 sequences: a power-of-two data-parallel degree, the 9 in 72 in the pipeline.
  CHECK(best.parallel.pipeline_parallel_degree % 9 == 0);
  CHECK(1024 % best.data_parallel_degree() == 0);
  CHECK_FALSE(best.parallel.stage_layers.empty());
}

TEST_CASE("sweep: a new model's job without a layout searches every point over nodes 1..16 and each fits",
          "[search][sweep]") {
  const SweepJob job = testing::file_sweep_job(kData + "new-model-no-layout.yaml", false);
  SweepOptions o;
  o.axes = {parse_axis("nodes=1,2,4,8,16")};
  o.search_options.simulate = false;  // the estimator's ranking: fast
  const MicrobatchPolicy policy = microbatch_policy(job, o);
  CHECK(policy.searched);
  CHECK(policy.searched_because == "the job file gives no parallel: section");
  const std::vector<SweepPoint> points = run_sweep(job, o);
  REQUIRE(points.size() == 5);
  for (const SweepPoint& p : points) {
    INFO("nodes " << p.values[0] << ": " << p.reason);
    CHECK(p.status == PointStatus::fits);
    CHECK(p.has_metrics);
    CHECK(p.metrics.step_time > 0);
    CHECK(p.job.world_size() == 8 * std::stoi(p.values[0]));
  }
  // A layout key on an axis: the points are estimated as written (micro-batches re-planned).
  o.axes = {parse_axis("nodes=1,2"), parse_axis("tensor_parallel_degree=8")};
  CHECK_FALSE(microbatch_policy(job, o).searched);
}
