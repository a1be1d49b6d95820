// Multi-rank `partune run` against a single-process reference: for every parallel kind
// alone and in combinations up to a world of 4, the loss of each of 5 steps equals the
// one-rank run of the same model and data within 1e-4 relative (fp32, CPU). Each run is
// the real thing: `partune-run --nproc N` supervising N processes over Gloo.
//
// The reference is tests/backend/data/tiny-parallel.yaml on one rank with the whole
// batch in one micro-batch: an independent computation (no pipeline, no collectives, no
// micro-batch split), so a rank that trains on the wrong sequences, a missing gradient
// sum or average, a stale parameter slice or a wrongly paired transfer shows as a loss
// that drifts from it within the 5 steps.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "multirank_runs.hpp"

namespace {

const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-parallel.yaml";
constexpr int kSteps = 5;

using partune::test::Run;

// `partune-run run tiny-parallel.yaml --json --steps STEPS <args>` (multirank_runs.hpp).
Run run(const std::string& args, int steps = kSteps) { return partune::test::run_job(kJob, args, steps); }

// `args` changes the layout; `reference_args` what the reference shares with it (the
// optimizer, say). Checks world size and every step's loss.
void check_equivalent(const std::string& args, int world, const std::string& reference_args = "") {
  partune::test::check_equivalent(kJob, args, world, reference_args, kSteps);
}

const std::string kFour = "--set nodes=2 ";  // 2 nodes x 2 ranks

}  // namespace

TEST_CASE("multi-rank: tensor parallel 2", "[backend][multirank]") {
  check_equivalent("--set tensor_parallel_degree=2", 2);
}

TEST_CASE("multi-rank: pipeline 2, GPipe", "[backend][multirank]") {
  check_equivalent("--set pipeline_parallel_degree=2 --set pipeline=simple", 2);
}

TEST_CASE("multi-rank: pipeline 2, 1F1B", "[backend][multirank]") {
  check_equivalent("--set pipeline_parallel_degree=2 --set pipeline=interleaved", 2);
}

TEST_CASE("multi-rank: pipeline 2, interleaved 1F1B (2 virtual stages)", "[backend][multirank]") {
  check_equivalent("--set pipeline_parallel_degree=2 --set virtual_stages=2", 2);
}

TEST_CASE("multi-rank: pipeline 2, interleaved, receives posted early (overlap_p2p_comm)", "[backend][multirank]") {
  check_equivalent("--set pipeline_parallel_degree=2 --set virtual_stages=2 --set overlap_p2p_comm=true", 2);
}

TEST_CASE("multi-rank: pipeline 2, interleaved with uneven chunks and empty ends (Llama 3's stages)",
          "[backend][multirank]") {
  // Model chunks [0, 2, 2, 0]: stage 0's first chunk the embedding alone, stage 1's last
  // the (tied) head alone; and [1, 2, 1, 0].
  check_equivalent("--set pipeline_parallel_degree=2 --set virtual_stages=2 --set stage_layers=[0,2,2,0]", 2);
  check_equivalent("--set pipeline_parallel_degree=2 --set virtual_stages=2 --set stage_layers=[1,2,1,0]", 2);
}

TEST_CASE("multi-rank: pipeline 2 with the LM head on stage 0", "[backend][multirank]") {
  check_equivalent("--set pipeline_parallel_degree=2 --set lm_head_stage=first", 2);
}

TEST_CASE("multi-rank: data parallel 2", "[backend][multirank]") {
  check_equivalent("", 2);
}

TEST_CASE("multi-rank: data parallel 2 reducing gradients in fp32 (grad_reduce_in_fp32)", "[backend][multirank]") {
  // Buckets and optimizer-state reduce-scatters travel as fp32 (in this fp32 run the cast
  // changes no value): the losses stay the reference's.
  check_equivalent("--set grad_reduce_in_fp32=true", 2);
  check_equivalent("--set grad_reduce_in_fp32=true --set shard_optimizer_state=true", 2);
}

TEST_CASE("multi-rank: data parallel 2 with SGD", "[backend][multirank]") {
  check_equivalent("", 2, "--set optimizer=sgd");
}

TEST_CASE("multi-rank: sharded data parallel 2", "[backend][multirank]") {
  check_equivalent("--set sharded_data_parallel_degree=2", 2);
}

// Each flavour's calls (sharding.hpp), run by the backend as that many collectives: ZeRO-3
// gathers GPT-val's layer (h 256, f 1024) in 3 calls, its qkv (197,376 elements), fc1
// (263,168) and fc2 (262,400) being above the 1e5-element persistence threshold and the
// projection (65,792) below it; FSDP in one, its backward prefetch issued after the
// gradient kernels. The same losses as one process.
TEST_CASE("multi-rank: sharded data parallel 2 as ZeRO-3 and as FSDP runs it", "[backend][multirank]") {
  check_equivalent("--set sharded_data_parallel_degree=2 --set sharding_flavor=zero3", 2);
  check_equivalent("--set sharded_data_parallel_degree=2 --set sharding_flavor=fsdp "
                   "--set 'sharding={backward_prefetch: post}'",
                   2);
}

TEST_CASE("multi-rank: optimizer-state sharding over data parallel 2", "[backend][multirank]") {
  check_equivalent("--set shard_optimizer_state=true", 2);
  // ZeRO-2: every micro-batch's gradients reduce-scattered into the rank's slice, where
  // they add up (a sum of slices is the slice of the sum).
  check_equivalent("--set shard_optimizer_state=true --set shard_gradients=true", 2);
}

TEST_CASE("multi-rank: optimizer state offload (ZeRO-Offload, FSDP CPU offload)", "[backend][multirank][offload]") {
  // One rank stepping on host clones is the one-rank step itself.
  check_equivalent("--set 'instance_type={base: local-cpu, gpus_per_node: 1}' --set microbatches=1 "
                   "--set offload_optimizer=true",
                   1);
  check_equivalent("--set offload_optimizer=true", 2);
  check_equivalent("--set shard_optimizer_state=true --set offload_optimizer=true", 2);
  check_equivalent("--set sharded_data_parallel_degree=2 --set offload_optimizer=true", 2);
  // The parameter shard kept on the host and gathered from there.
  check_equivalent("--set sharded_data_parallel_degree=2 --set offload_optimizer=true --set offload_parameters=true", 2);
  check_equivalent("--set sharded_data_parallel_degree=2 --set sharding_flavor=fsdp --set offload_optimizer=true "
                   "--set offload_parameters=true",
                   2);
}

TEST_CASE("multi-rank: activation checkpointing, full and selective", "[backend][multirank]") {
  check_equivalent("--set activation_checkpointing=full", 2);
  check_equivalent("--set activation_checkpointing=selective --set pipeline_parallel_degree=2", 2);
}

// Selective checkpointing recomputes the attention cores alone (no tensor collective runs
// twice): with tensor 2, and tensor 2 x pipeline 2.
TEST_CASE("multi-rank: selective checkpointing with tensor parallelism", "[backend][multirank]") {
  check_equivalent("--set activation_checkpointing=selective --set tensor_parallel_degree=2", 2);
  check_equivalent(kFour + "--set activation_checkpointing=selective --set tensor_parallel_degree=2 "
                           "--set pipeline_parallel_degree=2",
                   4);
}

TEST_CASE("multi-rank: activation offload", "[backend][multirank]") {
  check_equivalent("--set activation_checkpointing=full --set offload_activations=true", 2);
  check_equivalent(
      "--set activation_checkpointing=full --set offload_activations=true --set pipeline_parallel_degree=2", 2);
}

TEST_CASE("multi-rank: gradient accumulation", "[backend][multirank]") {
  check_equivalent("--set gradient_accumulation=2 --set microbatches=1", 2);
  check_equivalent("--set gradient_accumulation=2 --set pipeline_parallel_degree=2", 2);
}

TEST_CASE("multi-rank: every placement string for data 2 x pipeline 2", "[backend][multirank]") {
  for (const char* order : {"DPT", "DTP", "PDT", "PTD", "TDP", "TPD"})
    check_equivalent(kFour + "--set pipeline_parallel_degree=2 --set placement_strategy=" + order, 4);
}

TEST_CASE("multi-rank: every placement string for tensor 2 x data 2", "[backend][multirank]") {
  for (const char* order : {"DPT", "DTP", "PDT", "PTD", "TDP", "TPD"})
    check_equivalent(kFour + "--set tensor_parallel_degree=2 --set placement_strategy=" + order, 4);
}

TEST_CASE("multi-rank: tensor 2 x pipeline 2 (1F1B, untied head)", "[backend][multirank]") {
  check_equivalent(kFour + "--set tensor_parallel_degree=2 --set pipeline_parallel_degree=2", 4);
  check_equivalent(kFour + "--set tensor_parallel_degree=2 --set pipeline_parallel_degree=2", 4,
                   "--set model.tied_embeddings=false");
}

TEST_CASE("multi-rank: sharded data parallel 2 x pipeline 2, and over 2 replicas", "[backend][multirank]") {
  check_equivalent(kFour + "--set sharded_data_parallel_degree=2 --set pipeline_parallel_degree=2", 4);
  check_equivalent(kFour + "--set sharded_data_parallel_degree=2 --set microbatches=1", 4);
}

TEST_CASE("multi-rank: data 2 x tensor 2 with optimizer-state sharding and checkpointing", "[backend][multirank]") {
  check_equivalent(kFour +
                       "--set tensor_parallel_degree=2 --set shard_optimizer_state=true "
                       "--set activation_checkpointing=full",
                   4);
}

TEST_CASE("multi-rank: interleaved pipeline 2 x data 2 with offload", "[backend][multirank]") {
  check_equivalent(kFour +
                       "--set pipeline_parallel_degree=2 --set virtual_stages=2 "
                       "--set activation_checkpointing=full --set offload_activations=true",
                   4);
}

TEST_CASE("multi-rank: resuming after step 3 gives steps 4 and 5 of the uninterrupted run", "[backend][multirank]") {
  for (const std::string& layout : {kFour + "--set pipeline_parallel_degree=2 --set shard_optimizer_state=true",
                                   kFour + "--set sharded_data_parallel_degree=2 --set microbatches=1"}) {
    INFO(layout);
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("partune-resume-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    const Run whole = run(layout);
    const std::string three = layout + " --save " + dir.string();
    const Run first = run(three, 3);
    REQUIRE(first.losses.size() == 3);
    const Run rest = run(layout + " --resume " + dir.string(), 2);
    REQUIRE(rest.losses.size() == 2);
    CHECK(rest.doc.at("resumed_after").get<int>() == 3);
    CHECK(rest.doc.at("steps")[0].at("step").get<int>() == 4);
    for (int i = 0; i < 3; ++i) CHECK(first.losses[i] == whole.losses[i]);
    CHECK(rest.losses[0] == Approx(whole.losses[3]).epsilon(1e-6));
    CHECK(rest.losses[1] == Approx(whole.losses[4]).epsilon(1e-6));
    std::filesystem::remove_all(dir);
  }
}

// ---- sequence parallelism: the same numbers as one process --------------------------

TEST_CASE("multi-rank: sequence parallelism, tensor 2", "[backend][multirank][sequence]") {
  check_equivalent("--set tensor_parallel_degree=2 --set sequence_parallel=true", 2);
}

TEST_CASE("multi-rank: sequence parallelism, tensor 2 x pipeline 2, and with full checkpointing",
          "[backend][multirank][sequence]") {
  check_equivalent(kFour + "--set tensor_parallel_degree=2 --set pipeline_parallel_degree=2 --set sequence_parallel=true",
                   4);
  check_equivalent(kFour +
                       "--set tensor_parallel_degree=2 --set pipeline_parallel_degree=2 --set sequence_parallel=true "
                       "--set activation_checkpointing=full",
                   4);
}

// Also with the data group's optimizer slices and with sharding: the gradient sum then
// covers each rank's owned slices of the replicated parameters.
TEST_CASE("multi-rank: sequence parallelism, tensor 2 x data 2", "[backend][multirank][sequence]") {
  check_equivalent(kFour + "--set tensor_parallel_degree=2 --set sequence_parallel=true", 4);
  check_equivalent(
      kFour + "--set tensor_parallel_degree=2 --set sequence_parallel=true --set shard_optimizer_state=true", 4);
  check_equivalent(
      kFour + "--set tensor_parallel_degree=2 --set sequence_parallel=true --set sharded_data_parallel_degree=2", 4);
}

// ---- the tensor-parallel calls the layers made, per stage and micro-batch -------------

namespace {

// Per pass (forward, backward, recompute), the tensor-parallel calls one rank's layers
// made in one step, read from the executed trace: each tensor event's count goes to the
// pass of the last compute of the same (micro-batch, chunk, layer) before it. (An
// asynchronous sequence-parallel re-gather, started before its backward, then counts
// with the forward or recompute before it: sequence-parallel checks compare totals.)
// Tensor events without a micro-batch are the program's sequence-parallel gradient sums,
// counted apart.
struct StageCalls {
  std::map<std::string, int> calls;  // by pass
  int gradient_sums = 0;             // tensor collectives without a micro-batch
  int recomputed_layers = 0;
  bool first_stage = true;           // received no activation for chunk 0
  int total() const {
    int n = 0;
    for (const auto& [pass, c] : calls) n += c;
    return n;
  }
};

std::map<int, StageCalls> tensor_calls_by_rank(const nlohmann::json& trace) {
  std::map<int, StageCalls> out;
  std::map<int, std::map<std::string, std::string>> last_pass;  // rank -> key -> pass
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    const auto& a = e.at("args");
    const int rank = a.at("rank").get<int>();
    const std::string name = e.at("name").get<std::string>();
    const std::string key = std::to_string(a.value("microbatch", -1)) + "/" + std::to_string(a.value("chunk", 0)) +
                            "/" + std::to_string(a.value("layer", -1));
    StageCalls& s = out[rank];
    if (name == "recv_activation" && a.value("chunk", 0) == 0) s.first_stage = false;
    if (name == "forward" || name == "backward" || name == "recompute") {
      if (name == "recompute") ++s.recomputed_layers;
      last_pass[rank][key] = name;
      continue;
    }
    if (a.value("group", "") != "tensor") continue;
    if (a.value("microbatch", -1) < 0) {
      s.gradient_sums += a.at("count").get<int>();
      continue;
    }
    const auto pass = last_pass[rank].find(key);
    s.calls[pass == last_pass[rank].end() ? "none" : pass->second] += a.at("count").get<int>();
  }
  return out;
}

// Runs one step with --trace and returns the calls of each rank.
std::map<int, StageCalls> traced_calls(const std::string& args) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("partune-tensor-calls-" + std::to_string(::getpid()) + ".json")).string();
  run(args + " --trace " + path, 1);
  std::ifstream in(path);
  REQUIRE(in.good());
  const nlohmann::json trace = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  return tensor_calls_by_rank(trace);
}

constexpr int kMicrobatches = 2, kLayersPerStage = 2;  // tiny-parallel.yaml on pipeline 2

}  // namespace

// Megatron's rule, per stage and micro-batch, written out: forward 2 per layer (g after
// attention and the MLP), +1 on the embedding's stage (the vocabulary-parallel
// embedding's g), +3 on the head's (the cross-entropy's max, sum and target logit);
// backward 2 per layer (f before QKV and fc1), +1 on the head's stage (the head's f);
// full checkpointing repeats the forward's 2 per recomputed layer, selective checkpointing
// none (it recomputes the attention cores alone).
TEST_CASE("multi-rank: tensor calls per stage follow Megatron's rule (tensor 2 x pipeline 2)",
          "[backend][multirank][tensor_calls]") {
  struct Layout {
    const char* args;
    bool head_first;
    int recompute_calls = 0;  // per recomputed layer
  };
  for (const Layout& layout : {Layout{"", false}, Layout{"--set lm_head_stage=first", true},
                               Layout{"--set model.tied_embeddings=false", false},
                               Layout{"--set activation_checkpointing=full", false, 2},
                               Layout{"--set activation_checkpointing=selective", false, 0}}) {
    INFO(layout.args);
    const auto ranks =
        traced_calls(kFour + "--set tensor_parallel_degree=2 --set pipeline_parallel_degree=2 " + layout.args);
    REQUIRE(ranks.size() == 4);
    for (const auto& [rank, s] : ranks) {
      INFO("rank " << rank << (s.first_stage ? " (first stage)" : " (last stage)"));
      const bool embedding = s.first_stage, head = layout.head_first == s.first_stage;
      const int L = kLayersPerStage;
      CHECK(s.calls.count("none") == 0);
      CHECK(s.gradient_sums == 0);
      CHECK(s.calls.at("forward") == kMicrobatches * (2 * L + (embedding ? 1 : 0) + (head ? 3 : 0)));
      CHECK(s.calls.at("backward") == kMicrobatches * (2 * L + (head ? 1 : 0)));
      if (std::string(layout.args).find("checkpointing") != std::string::npos)
        CHECK(s.recomputed_layers == kMicrobatches * L);
      const int recompute = layout.recompute_calls * s.recomputed_layers;
      CHECK(s.calls.count("recompute") == (recompute > 0 ? 1u : 0u));
      if (recompute > 0) CHECK(s.calls.at("recompute") == recompute);
    }
  }
}

// With sequence parallelism: forward 4 per layer (2 all-gathers entering the regions, 2
// reduce-scatters leaving them), +1 on the embedding's stage (its reduce-scatter), +1 +3
// on the head's (the all-gather before the logits, the loss's 3); backward 6 per layer
// (2 reduce-scatters, 2 all-gathers of gradients, 2 re-gathers of the GEMMs' inputs), +1
// on the embedding's stage (the all-gather of its output's gradient), +2 on the head's (a
// reduce-scatter and a re-gather); full checkpointing repeats the forward's 4 per layer,
// selective checkpointing none. Besides, one sum of the replicated parameters' gradients
// a step.
TEST_CASE("multi-rank: sequence-parallel tensor calls per stage (tensor 2 x pipeline 2)",
          "[backend][multirank][tensor_calls][sequence]") {
  struct Layout {
    const char* args;
    bool head_first;
    int recompute_calls = 0;  // per recomputed layer
  };
  for (const Layout& layout : {Layout{"", false}, Layout{"--set lm_head_stage=first", true},
                               Layout{"--set model.tied_embeddings=false", false},
                               Layout{"--set activation_checkpointing=full", false, 4},
                               Layout{"--set activation_checkpointing=selective", false, 0}}) {
    INFO(layout.args);
    const auto ranks = traced_calls(kFour +
                                    "--set tensor_parallel_degree=2 --set pipeline_parallel_degree=2 "
                                    "--set sequence_parallel=true " +
                                    layout.args);
    REQUIRE(ranks.size() == 4);
    for (const auto& [rank, s] : ranks) {
      INFO("rank " << rank << (s.first_stage ? " (first stage)" : " (last stage)"));
      const bool embedding = s.first_stage, head = layout.head_first == s.first_stage;
      const int L = kLayersPerStage;
      const int forward = 4 * L + (embedding ? 1 : 0) + (head ? 4 : 0);
      const int backward = 6 * L + (embedding ? 1 : 0) + (head ? 2 : 0);
      CHECK(s.total() == kMicrobatches * (forward + backward) + layout.recompute_calls * s.recomputed_layers);
      if (std::string(layout.args).find("checkpointing") != std::string::npos)
        CHECK(s.recomputed_layers == kMicrobatches * L);
      CHECK(s.gradient_sums == 1);
    }
  }
}

// FlashAttention (kernels/flash_attention.hpp) in place of the standard core: tensor 2 and
// pipeline 2 against the one-process reference with the standard core, step by step.
TEST_CASE("multi-rank: flash attention, tensor 2 and pipeline 2", "[backend][multirank][flash]") {
  check_equivalent("--set flash_attention=true --set tensor_parallel_degree=2", 2);
  check_equivalent("--set flash_attention=true --set pipeline_parallel_degree=2 --set pipeline=interleaved", 2);
}
