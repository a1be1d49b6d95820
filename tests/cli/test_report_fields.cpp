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
    // estimator.hpp: step_time = compute + tensor_parallel_comm + context_parallel_comm
    //   + expert_parallel_comm + pipeline_bubble + pipeline_drain_waits + pipeline_p2p
    //   + data_parallel_exposed + sharded_exposed + offload_exposed + optimizer.
    const double parts = b.compute + b.tensor_parallel_comm + b.context_parallel_comm + b.expert_parallel_comm +
                         b.pipeline_bubble + b.pipeline_drain_waits + b.pipeline_p2p + b.data_parallel_exposed +
                         b.sharded_exposed + b.offload_exposed + b.optimizer;
    double rows = 0;
    int labelled = 0;
    for (const StepField& f : step_fields())
      if (f.label) rows += e.breakdown.*f.value, ++labelled;
    CHECK(labelled == 11);
    CHECK(rows == Approx(parts).epsilon(1e-12));
    CHECK(rows == Approx(e.step_time).epsilon(1e-9));
  }
}

// The JSON's sum rule (breakdown.sum_rule), on every shipped job: the exposed parts add up
// to the step (issue 53: the old flat keys summed to 64.2 s for a 52.7 s step), each
// total is at least its exposed part, and context and expert traffic have their own keys.
TEST_CASE("estimate --json: the exposed parts add up to the step on every shipped job", "[report][estimate]") {
  const std::string dir = std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/";
  for (const char* name : {"gpt3-175b-p4d-120", "gpt-neox-20b-p4d-16", "gpt-neox-13b-p4d-16-sharded",
                           "llama-3-70b-128k-p5", "mixtral-8x7b-p4d-8", "bloom-176b-p4de-56"}) {
    INFO(name);
    const Job job = load_job(dir + name + ".yaml");
    const nlohmann::json j = estimate_json(job, estimate(job));
    const nlohmann::json& b = j["breakdown"];
    double sum = 0;
    for (const auto& part : b["exposed_s"].items()) sum += part.value().get<double>();
    CHECK(sum == Approx(j["step_time_s"].get<double>()).epsilon(1e-9));
    for (const char* kind : {"data_parallel", "sharded", "offload"})
      CHECK(b["totals_s"][kind].get<double>() >= b["exposed_s"][kind].get<double>() * (1 - 1e-12));
    CHECK(b["totals_s"]["recompute"].get<double>() <= b["exposed_s"]["compute"].get<double>());
    CHECK(b["sum_rule"].get<std::string>().find("add up to step_time_s") != std::string::npos);
  }
  // Context parallelism's exchange and the experts' all-to-alls are not tensor-parallel time.
  const nlohmann::json cp = estimate_json(load_job(dir + "llama-3-70b-128k-p5.yaml"),
                                          estimate(load_job(dir + "llama-3-70b-128k-p5.yaml")));
  CHECK(cp["breakdown"]["exposed_s"]["context_parallel"].get<double>() > 0);
  const Job moe = load_job(dir + "mixtral-8x7b-p4d-8.yaml");
  const nlohmann::json ep = estimate_json(moe, estimate(moe));
  CHECK(ep["breakdown"]["exposed_s"]["expert_parallel"].get<double>() >
        ep["breakdown"]["exposed_s"]["tensor_parallel"].get<double>());
}

TEST_CASE("estimate fields: every number of StepBreakdown has one key", "[report][estimate]") {
  // StepBreakdown is fifteen doubles; each has its own key, under exposed_s (a part of the
  // step: labelled) or totals_s.
  static_assert(sizeof(StepBreakdown) == 15 * sizeof(double), "StepBreakdown changed: add its field to step_fields()");
  const StepBreakdown b;
  std::set<const double*> members;  // where each field's number lives in one StepBreakdown
  std::set<std::string> keys;
  for (const StepField& f : step_fields())
    members.insert(&(b.*f.value)), keys.insert(std::string(f.label ? "exposed_s." : "totals_s.") + f.key);
  CHECK(members.size() == 15);
  CHECK(keys.size() == 15);
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
  CHECK(j["breakdown"].size() == 3);  // exposed_s, totals_s, sum_rule
  CHECK(j["breakdown"]["exposed_s"].size() + j["breakdown"]["totals_s"].size() == step_fields().size());
  std::set<std::string> memory{"stage"};
  for (const MemoryField& f : memory_fields())
    if (f.key) memory.insert(f.key);
  CHECK(j["memory"].size() == memory.size());
  for (const std::string& k : memory) CHECK(j["memory"].contains(k));
  CHECK(j["step_time_s"].get<double>() == estimate(job).step_time);
}

TEST_CASE("sweep job: the file's own micro-batches fix them, each point loads with its keys", "[report][sweep]") {
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
