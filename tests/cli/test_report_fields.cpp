// The reports' tables of an Estimate's numbers (cli/estimate_fields.hpp) against the
// definitions in estimator.hpp and memory.hpp: the text's breakdown rows are the nine
// parts StepBreakdown says add up to the step, the memory rows add up to
// MemoryBreakdown::total(), every number of StepBreakdown has a key, and estimate_json
// writes every key of the tables. And a sweep's job read from its file (cli/sweep_job.hpp):
// whether the file itself fixes its micro-batches, and each point loaded with its keys.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "partune/report/estimate_fields.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/report/report.hpp"
#include "partune/report/sweep_job.hpp"

using namespace partune;
using namespace partune::report;

namespace {

const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/gpt-neox-20b-p4d-16.yaml";

// GPT-NeoX-20B on 16 p4d nodes, tensor 8 x pipeline 2, data-parallel 8, 96 sequences.
std::string job_text(const std::string& parallel_extra) {
  return "kind: job\nname: fields\nmodel: gpt-neox-20b\ncluster: {instance_type: p4d.24xlarge, nodes: 16}\n"
         "training: {global_batch: 96, precision: fp16}\n"
         "parallel: {tensor_parallel_degree: 8, pipeline_parallel_degree: 2, activation_checkpointing: full" +
         parallel_extra + "}\n";
}

}  // namespace

TEST_CASE("estimate fields: the text's breakdown rows are the parts that add up to the step", "[report][estimate]") {
  // With offload and sharding on, every exposed part of the step is there to be counted.
  for (const std::vector<std::string>& set :
       {std::vector<std::string>{}, {"offload_activations=true", "sharded_data_parallel_degree=8"}}) {
    const Estimate e = estimate(load_job(kJob, set));
    const StepBreakdown& b = e.breakdown;
    // estimator.hpp: step_time = compute + tensor_parallel_comm + pipeline_bubble + pipeline_drain_waits
    //   + pipeline_p2p + data_parallel_exposed + sharded_exposed + offload_exposed + optimizer.
    const double parts = b.compute + b.tensor_parallel_comm + b.pipeline_bubble + b.pipeline_drain_waits +
                         b.pipeline_p2p + b.data_parallel_exposed + b.sharded_exposed + b.offload_exposed + b.optimizer;
    double rows = 0;
    int labelled = 0;
    for (const StepField& f : step_fields())
      if (f.label) rows += e.breakdown.*f.value, ++labelled;
    CHECK(labelled == 9);
    CHECK(rows == Approx(parts).epsilon(1e-12));
    CHECK(rows == Approx(e.step_time).epsilon(1e-9));
  }
}

TEST_CASE("estimate fields: every number of StepBreakdown has one key", "[report][estimate]") {
  // StepBreakdown is thirteen doubles; each has its own key.
  static_assert(sizeof(StepBreakdown) == 13 * sizeof(double), "StepBreakdown changed: add its field to step_fields()");
  const StepBreakdown b;
  std::set<const double*> members;  // where each field's number lives in one StepBreakdown
  std::set<std::string> keys;
  for (const StepField& f : step_fields()) members.insert(&(b.*f.value)), keys.insert(f.key);
  CHECK(members.size() == 13);
  CHECK(keys.size() == 13);
}

TEST_CASE("estimate fields: the memory rows add up to the total", "[report][estimate]") {
  const Estimate e = estimate(load_job(kJob, {"activation_checkpointing=selective"}));
  double sum = 0, total = 0;
  for (const MemoryField& f : memory_fields()) {
    if (f.row == MemoryRow::part) sum += f.value(e.memory);
    if (f.row == MemoryRow::overlap) sum -= f.value(e.memory);
    if (f.row == MemoryRow::total) total = f.value(e.memory);
  }
  CHECK(total == e.memory.total());
  CHECK(sum == Approx(e.memory.total()).epsilon(1e-12));
}

TEST_CASE("estimate fields: estimate_json writes every key of the tables, and only those", "[report][estimate]") {
  const Job job = load_job(kJob);
  const nlohmann::json j = estimate_json(job, estimate(job));
  std::set<std::string> top{"job", "model", "parameters", "active_parameters", "active_compute_parameters", "gpus", "fits", "not_fit_reason", "breakdown", "memory"};
  for (const EstimateField& f : estimate_fields()) top.insert(f.key);
  std::set<std::string> written;
  for (const auto& kv : j.items()) written.insert(kv.key());
  CHECK(written == top);
  CHECK(j["breakdown"].size() == step_fields().size());
  std::set<std::string> memory{"stage"};
  for (const MemoryField& f : memory_fields())
    if (f.key) memory.insert(f.key);
  CHECK(j["memory"].size() == memory.size());
  for (const std::string& k : memory) CHECK(j["memory"].contains(k));
  CHECK(j["step_time_s"].get<double>() == estimate(job).step_time);
}

TEST_CASE("sweep job: the file's own micro-batches fix them; each point loads with its keys", "[report][sweep]") {
  const search::SweepJob open = sweep_job_text(job_text(""), "open.yaml", {});
  CHECK_FALSE(open.file_sets_microbatches);
  CHECK(open.origin == "open.yaml");
  const search::SweepJob fixed = sweep_job_text(job_text(", microbatches: 2"), "fixed.yaml", {"nodes=8"});
  CHECK(fixed.file_sets_microbatches);
  CHECK(fixed.base.cluster.nodes == 8);  // the sweep's own --set
  CHECK(fixed.base.parallel.microbatches == 2);
  const Job point = fixed.load({"nodes=4", "microbatches=4"}, JobRules::every);
  CHECK(point.cluster.nodes == 4);
  CHECK(point.parallel.microbatches == 4);
  // From the file: the shipped job sets its micro-batches (48).
  const search::SweepJob shipped = sweep_job_file(kJob, {});
  CHECK(shipped.file_sets_microbatches);
  CHECK(shipped.base.parallel.microbatches == 48);
  CHECK(shipped.load({"nodes=8"}, JobRules::every).cluster.nodes == 8);
}
