// What a sweep does with micro-batches (search/sweep.hpp, MicrobatchPolicy): a job that
// leaves them open keeps its global batch and micro-batch size at every point (the counts
// below are worked out by hand from global batch / (data-parallel degree x size)); a job
// that fixes them keeps them, and a point they do not divide is invalid and says so; a
// point that does not fit in memory says why.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/scenario.hpp"
#include "partune/search/sweep.hpp"
#include "sweep_jobs.hpp"

using namespace partune;
using namespace partune::search;

namespace {

const std::string kFixedJob = std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/gpt-neox-20b-p4d-16.yaml";

// GPT-NeoX-20B on p4d (8 GPUs a node), tensor 8 x pipeline 2: data-parallel degree =
// nodes / 2. No parallel.microbatches: open. At 16 nodes (dp 8) one micro-batch of
// global_batch / 8 sequences.
std::string open_job(int global_batch, const std::string& extra_parallel = "") {
  return "kind: job\nname: open-microbatches\nmodel: gpt-neox-20b\n"
         "cluster: {instance_type: p4d.24xlarge, nodes: 16}\n"
         "training: {global_batch: " + std::to_string(global_batch) + ", precision: fp16}\n"
         "parallel: {tensor_parallel_degree: 8, pipeline_parallel_degree: 2, activation_checkpointing: full" +
         extra_parallel + "}\n";
}

// The shipped job sets parallel.microbatches (48).
SweepJob fixed_job(const std::vector<std::string>& overrides = {}) {
  return testing::file_sweep_job(kFixedJob, true, overrides);
}

SweepJob open_sweep_job(int global_batch, const std::string& extra_parallel = "") {
  return testing::text_sweep_job(open_job(global_batch, extra_parallel), "open.yaml", false);
}

SweepOptions open_sweep(const std::string& axis) {
  SweepOptions o;
  o.axes = {parse_axis(axis)};
  o.threads = 2;
  return o;
}

}  // namespace

TEST_CASE("sweep: open micro-batches keep the global batch and the micro-batch size as nodes change",
          "[search][sweep]") {
  // Global batch 96; at 16 nodes dp 8, so 12 sequences per micro-batch.
  const SweepJob job = open_sweep_job(96);
  const SweepOptions o = open_sweep("nodes=4,6,10,12,16,32");
  const MicrobatchPolicy policy = microbatch_policy(job, o);
  CHECK(policy.adapted);
  CHECK(policy.fixed_by.empty());
  CHECK(policy.microbatch_size == 12);
  const std::vector<SweepPoint> points = run_sweep(job, o);
  REQUIRE(points.size() == 6);
  struct Want {
    int microbatches, size;
  };
  // dp 2: 48 a rank = 4 x 12.   dp 3: 32 a rank; 12 does not divide it, 8 does: 4 x 8.
  // dp 6: 16 a rank: 2 x 8.     dp 8: 12: 1 x 12.   dp 16: 6 a rank, less than 12: 1 x 6.
  const Want want[] = {{4, 12}, {4, 8}, {0, 0}, {2, 8}, {1, 12}, {1, 6}};
  for (int i : {0, 1, 3, 4, 5}) {
    INFO("nodes " << points[i].values[0]);
    REQUIRE(points[i].status != PointStatus::invalid);
    CHECK(points[i].job.parallel.microbatches == want[i].microbatches);
    CHECK(points[i].job.microbatch_size() == want[i].size);
    CHECK(points[i].job.training.global_batch == 96);
  }
  // dp 5 does not divide 96 sequences at all: no count of micro-batches helps.
  CHECK(points[2].status == PointStatus::invalid);
  CHECK(points[2].reason.find("training.global_batch: 96 is not divisible by data-parallel degree 5") == 0);
}

TEST_CASE("sweep: open micro-batches under virtual stages come in multiples of the pipeline degree",
          "[search][sweep]") {
  // Global batch 64 at dp 8: 8 sequences a rank in one micro-batch. With 2 virtual stages
  // the count must be even (pp 2): the largest size <= 8 that gives one is 4 (2 x 4).
  const SweepOptions o = open_sweep("virtual_stages=1,2");
  const std::vector<SweepPoint> points = run_sweep(open_sweep_job(64, ", pipeline: interleaved"), o);
  REQUIRE(points.size() == 2);
  REQUIRE(points[0].status != PointStatus::invalid);
  CHECK(points[0].job.parallel.microbatches == 1);
  CHECK(points[0].job.microbatch_size() == 8);
  REQUIRE(points[1].status != PointStatus::invalid);
  CHECK(points[1].job.parallel.virtual_stages == 2);
  CHECK(points[1].job.parallel.microbatches == 2);
  CHECK(points[1].job.microbatch_size() == 4);
}

TEST_CASE("sweep: fixed micro-batches stay, a point they do not divide is invalid and says what fixes them",
          "[search][sweep]") {
  SweepOptions o;
  o.axes = {parse_axis("nodes=8,12,10")};
  o.threads = 1;
  const MicrobatchPolicy policy = microbatch_policy(fixed_job(), o);
  CHECK_FALSE(policy.adapted);
  CHECK(policy.microbatches == 48);
  CHECK(policy.fixed_by == "the job file's parallel.microbatches");
  const std::vector<SweepPoint> points = run_sweep(fixed_job(), o);
  REQUIRE(points.size() == 3);
  // 8 nodes: dp 4, 1536 / (4 x 48) = 8 sequences each.
  REQUIRE(points[0].status == PointStatus::fits);
  CHECK(points[0].job.parallel.microbatches == 48);
  CHECK(points[0].job.microbatch_size() == 8);
  // 12 nodes: dp 6, 6 x 48 = 288 does not divide 1536.
  CHECK(points[1].status == PointStatus::invalid);
  CHECK(points[1].reason.find("= 288") != std::string::npos);
  CHECK(points[1].reason.find("fixed by the job file's parallel.microbatches") != std::string::npos);
  // 10 nodes: dp 5 does not divide 1536 at all; no count of micro-batches would, so the
  // reason does not blame them.
  CHECK(points[2].status == PointStatus::invalid);
  CHECK(points[2].reason.find("data-parallel degree 5") != std::string::npos);
  CHECK(points[2].reason.find("fixed by") == std::string::npos);

  // A --set or an axis fixes them too, and says so.
  o.overrides = {"microbatches=96"};
  CHECK(microbatch_policy(fixed_job(o.overrides), o).fixed_by == "--set microbatches=96");
  o.overrides.clear();
  o.axes = {parse_axis("nodes=8,16"), parse_axis("microbatches=1,2")};
  const MicrobatchPolicy by_axis = microbatch_policy(open_sweep_job(96), o);
  CHECK_FALSE(by_axis.adapted);
  CHECK(by_axis.fixed_by == "the axis microbatches");
  for (const SweepPoint& p : run_sweep(open_sweep_job(96), o))
    CHECK(p.job.parallel.microbatches == std::stoi(p.values[1]));
}

TEST_CASE("sweep: a point that does not fit in memory says why, with its estimate", "[search][sweep]") {
  SweepOptions o;
  o.axes = {parse_axis("activation_checkpointing=full,none")};
  o.threads = 1;
  const std::vector<SweepPoint> points = run_sweep(fixed_job(), o);
  REQUIRE(points.size() == 2);
  CHECK(points[0].status == PointStatus::fits);
  CHECK(points[0].reason.empty());
  // Without checkpointing 22 layers of activations do not fit on a 40 GiB A100.
  CHECK(points[1].status == PointStatus::does_not_fit);
  CHECK(points[1].has_metrics);
  CHECK_FALSE(points[1].metrics.fits);
  CHECK(points[1].reason.find("needs") != std::string::npos);
  CHECK(points[1].reason.find("40.0 GiB") != std::string::npos);
}

TEST_CASE("sweep --search: the job's fixed micro-batches do not stop a point the search can split", "[search][sweep]") {
  // 12 nodes: dp 6 does not divide 1536 into 48 micro-batches, but the search picks its
  // own (a small space, estimator only).
  const SweepJob job = testing::text_sweep_job(
      "kind: job\nname: fixed\nmodel: gpt-neox-20b\ncluster: {instance_type: p4d.24xlarge, nodes: 16}\n"
      "training: {global_batch: 1536, precision: fp16}\n"
      "parallel: {tensor_parallel_degree: 8, pipeline_parallel_degree: 2, microbatches: 48, "
      "activation_checkpointing: full}\n"
      "search: {tensor_parallel_degree: 8, pipeline_parallel_degree: 2, sharded_data_parallel_degree: 1, "
      "microbatch_size: [4, 8], pipeline: interleaved, virtual_stages: 1, placement_strategy: cluster, "
      "activation_checkpointing: full}\n",
      "fixed.yaml", true);
  SweepOptions o;
  o.axes = {parse_axis("nodes=12")};
  o.search = true;
  o.search_options.simulate = false;
  CHECK(microbatch_policy(job, o).searched);
  const std::vector<SweepPoint> points = run_sweep(job, o);
  REQUIRE(points.size() == 1);
  INFO(points[0].reason);
  REQUIRE(points[0].status == PointStatus::fits);
  const Job& best = points[0].job;
  CHECK(best.data_parallel_degree() == 6);  // 96 GPUs / (8 x 2)
  // 1536 / 6 = 256 sequences a rank: 64 x 4 or 32 x 8.
  CHECK(best.parallel.microbatches * best.microbatch_size() == 256);
}
