// The table of knobs: every key it lists round-trips (the job's value as text, read back
// by --fix, pins and matches the same job), the keys are the job file's and nothing else,
// and a candidate's description reads as written out by hand.
#include <catch2/catch.hpp>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/search/knobs.hpp"
#include "partune/search/space.hpp"

using namespace partune;
using namespace partune::search;
using testing::p4d_job;

namespace {

// gpt2-small on two p4d nodes (16 GPUs), global batch 32, with every knob away from its
// default: pp 2 x tp 2 x dp 4, sharded over 2, 4 micro-batches of 2, interleaved v2, ...
Job unusual_job() {
  Job j = p4d_job("gpt2-small", 2, 32);
  ParallelConfig& pc = j.parallel;
  pc.pipeline_parallel_degree = 2;
  pc.tensor_parallel_degree = 2;
  pc.sharded_data_parallel_degree = 2;
  pc.sharded_collective = CollectiveAlgorithm::all_to_all;
  pc.microbatches = 4;  // 32 / (dp 4 x 4) = 2 sequences each
  pc.pipeline = PipelineSchedule::one_f_one_b;
  pc.virtual_stages = 2;
  pc.placement_strategy = PlacementOrder::parse("PDT");
  pc.activation_checkpointing = Checkpointing::selective;
  pc.checkpointed_layers = 2;
  pc.offload_activations = true;
  pc.offload_optimizer = true;
  pc.offload_parameters = true;
  pc.shard_optimizer_state = false;
  pc.flash_attention = true;
  pc.sequence_parallel = true;
  testing::require_valid(j);
  return j;
}

// The same job's values, written out by hand, key by key.
const std::vector<std::pair<std::string, std::string>> kValues = {
    {"pipeline_parallel_degree", "2"},  {"tensor_parallel_degree", "2"},   {"context_parallel_degree", "1"},
    {"cp_comm_type", "p2p"},            {"sharded_data_parallel_degree", "2"},
    {"expert_parallel_degree", "1"},    {"expert_tensor_parallel_degree", "2"},  // (unset: the tensor degree)
    {"sharded_collective", "all_to_all"}, {"microbatch_size", "2"},       {"pipeline", "interleaved"},
    {"virtual_stages", "2"},            {"placement_strategy", "PDT"},     {"activation_checkpointing", "selective"},
    {"checkpointed_layers", "2"},       {"offload_activations", "true"},   {"offload_optimizer", "true"},
    {"offload_parameters", "true"},     {"shard_optimizer_state", "false"}, {"shard_gradients", "false"},
    {"flash_attention", "true"},        {"sequence_parallel", "true"},
};

// A job that differs from `j` in the knob `key` only (another legal value).
Job changed(Job j, const std::string& key) {
  ParallelConfig& pc = j.parallel;
  if (key == "pipeline_parallel_degree") pc.pipeline_parallel_degree = 4;
  else if (key == "tensor_parallel_degree") pc.tensor_parallel_degree = 4;
  else if (key == "context_parallel_degree") pc.context_parallel_degree = 2;
  else if (key == "cp_comm_type") pc.cp_comm_type = ContextComm::a2a;
  else if (key == "sharded_data_parallel_degree") pc.sharded_data_parallel_degree = 4;
  else if (key == "expert_parallel_degree") pc.expert_parallel_degree = 2;  // (a dense model: a job rule refuses it)
  else if (key == "expert_tensor_parallel_degree") pc.expert_tensor_parallel_degree = 1;  // (refused too)
  else if (key == "sharded_collective") pc.sharded_collective = CollectiveAlgorithm::ring;
  else if (key == "microbatch_size") pc.microbatches = 8;
  else if (key == "pipeline") pc.pipeline = PipelineSchedule::gpipe;
  else if (key == "virtual_stages") pc.virtual_stages = 1;
  else if (key == "placement_strategy") pc.placement_strategy = PlacementOrder::parse("TDP");
  else if (key == "activation_checkpointing") pc.activation_checkpointing = Checkpointing::full;
  else if (key == "checkpointed_layers") pc.checkpointed_layers = -1;
  else if (key == "offload_activations") pc.offload_activations = false;
  else if (key == "offload_optimizer") pc.offload_optimizer = false;
  else if (key == "offload_parameters") pc.offload_parameters = false;
  else if (key == "shard_optimizer_state") pc.shard_optimizer_state = true;
  else if (key == "shard_gradients") pc.shard_gradients = pc.shard_optimizer_state = true;
  else if (key == "flash_attention") pc.flash_attention = false;
  else if (key == "sequence_parallel") pc.sequence_parallel = false;
  else FAIL("no other value for " << key);
  return j;
}

}  // namespace

TEST_CASE("the table lists the job file's knobs, each once", "[search][knobs]") {
  std::vector<std::string> keys;
  for (const Knob& k : knobs()) keys.push_back(k.key);
  std::vector<std::string> expected;
  for (const auto& [key, value] : kValues) expected.push_back(key);
  CHECK(keys == expected);  // the description order, too
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());
  // An unknown key's message lists every key.
  try {
    knob("microbatches");
    FAIL("microbatches is derived from the batch, not a knob");
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    CHECK_THAT(message, Catch::Contains("microbatches"));
    for (const std::string& key : keys) CHECK_THAT(message, Catch::Contains(key));
  }
  CHECK(std::string(knob("parallel.sequence_parallel").key) == "sequence_parallel");
}

TEST_CASE("every knob round-trips: value, --fix, pin and matches agree", "[search][knobs]") {
  const Job job = unusual_job();
  for (const auto& [key, text] : kValues) {
    INFO("knob " << key);
    const Knob& k = knob(key);
    CHECK(k.value(job) == text);
    // --fix key=value allows this job and not the job with another value.
    SearchSpace fixed;
    restrict_space(fixed, key + "=" + text);
    CHECK(k.allows(fixed, job));
    const Job other = changed(job, key);
    CHECK(k.value(other) != text);
    CHECK_FALSE(k.allows(fixed, other));
    CHECK(matches(job, {key + "=" + text}));
    CHECK_FALSE(matches(other, {key + "=" + text}));
    CHECK(matches(other, {key + "=" + text + "," + k.value(other)}));
    // Pinning from the job is the same restriction.
    SearchSpace pinned;
    pin_from_job(pinned, job, {key});
    CHECK(k.allows(pinned, job));
    CHECK_FALSE(k.allows(pinned, other));
    // Only this knob is restricted: every other knob still allows anything.
    for (const Knob& rest : knobs())
      if (std::string(rest.key) != key) CHECK(rest.allows(fixed, changed(job, rest.key)));
  }
}

TEST_CASE("apply writes every knob of a point into the job", "[search][knobs]") {
  const Job base = p4d_job("gpt2-small", 2, 32);
  Point p;
  p.pipeline = 2, p.tensor = 2, p.sharded = 2, p.sharded_collective = CollectiveAlgorithm::all_to_all;
  p.microbatch_size = 2, p.microbatches = 4, p.schedule = PipelineSchedule::one_f_one_b, p.virtual_stages = 2;
  p.placement = PlacementOrder::parse("PDT");
  p.checkpointing = Checkpointing::selective, p.checkpointed_layers = 2;
  p.offload = true, p.shard_optimizer = false, p.flash = true, p.sequence_parallel = true;
  p.offload_optimizer = true, p.offload_parameters = true;
  const Job job = make_job(base, p);
  for (const auto& [key, text] : kValues) {
    INFO("knob " << key);
    CHECK(knob(key).value(job) == text);
  }
  // Checkpointed layers mean nothing without checkpointing: all (-1).
  p.checkpointing = Checkpointing::none;
  CHECK(make_job(base, p).parallel.checkpointed_layers == -1);
}

TEST_CASE("describe: a candidate's description, written out by hand", "[search][knobs]") {
  const Job job = unusual_job();
  CHECK(describe(job) == "pp2 tp2 dp4 sdp2(all_to_all) mb4x2 1f1b-v2 PDT ckpt-selective(2/stage) offload offload-opt offload-params flash sp");
  Job plain = p4d_job("gpt2-small", 1, 16);  // pp 1, tp 1, one micro-batch, cluster placement
  plain.parallel.microbatches = 2;
  CHECK(describe(plain) == "pp1 tp1 dp8 mb2x1 DPT");
  Job gpipe = plain;
  gpipe.parallel.pipeline_parallel_degree = 2;
  gpipe.parallel.pipeline = PipelineSchedule::gpipe;
  gpipe.parallel.stage_layers = {5, 7};
  gpipe.parallel.activation_checkpointing = Checkpointing::full;
  CHECK(describe(gpipe) == "pp2 tp1 dp4 mb2x2 gpipe DPT ckpt-full stages[5,7]");
  // Context parallelism shows its degree and exchange; the data-parallel degree is what
  // it leaves of the data axis.
  Job context = plain;
  context.parallel.context_parallel_degree = 2;
  context.parallel.cp_comm_type = ContextComm::a2a;
  CHECK(describe(context) == "pp1 tp1 dp4 cp2(a2a) mb2x2 DPT");
  // Folded experts show their own tensor degree, where it is not the tensor degree.
  Job moe = p4d_job("mixtral-8x7b", 1, 16);
  moe.parallel.tensor_parallel_degree = 2;
  moe.parallel.sequence_parallel = true;
  moe.parallel.expert_parallel_degree = 8;
  moe.parallel.expert_tensor_parallel_degree = 1;
  moe.parallel.microbatches = 4;
  testing::require_valid(moe);
  CHECK(describe(moe) == "pp1 tp2 dp4 ep8 etp1 mb4x1 DPT sp");
  moe.parallel.expert_parallel_degree = 4;
  moe.parallel.expert_tensor_parallel_degree = 2;  // the tensor degree, written out
  CHECK(describe(moe) == "pp1 tp2 dp4 ep4 mb4x1 DPT sp");
}
