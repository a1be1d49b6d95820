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
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace {

const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-parallel.yaml";
constexpr int kSteps = 5;

struct Run {
  std::vector<double> losses;
  nlohmann::json doc;
};

// Runs `partune-run run JOB --json <args>` and returns the per-step losses.
Run run(const std::string& args, int steps = kSteps) {
  const std::string cmd = std::string(PARTUNE_RUN_BINARY) + " run " + kJob + " --json --steps " +
                          std::to_string(steps) + " " + args;
  INFO(cmd);
  FILE* pipe = ::popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  INFO(out);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  Run r;
  r.doc = nlohmann::json::parse(out);
  for (const auto& s : r.doc.at("steps")) r.losses.push_back(s.at("loss").get<double>());
  return r;
}

// The same job on one rank, the whole batch as one micro-batch.
const std::vector<double>& reference(const std::string& extra = "") {
  static std::map<std::string, std::vector<double>> cache;
  auto it = cache.find(extra);
  if (it == cache.end())
    it = cache.emplace(extra, run("--set 'instance_type={base: local-cpu, gpus_per_node: 1}' --set microbatches=1 " + extra)
                                  .losses)
             .first;
  return it->second;
}

// `args` changes the layout; `reference_args` what the reference shares with it (the
// optimizer, say). Checks world size and every step's loss.
void check_equivalent(const std::string& args, int world, const std::string& reference_args = "") {
  const std::vector<double>& expected = reference(reference_args);
  REQUIRE(expected.size() == static_cast<std::size_t>(kSteps));
  const Run r = run(args + " " + reference_args);
  INFO("partune run " << args << " " << reference_args);
  CHECK(r.doc.at("world_size").get<int>() == world);
  REQUIRE(r.losses.size() == expected.size());
  for (int i = 0; i < kSteps; ++i) {
    INFO("step " << i + 1 << ": " << r.losses[i] << " vs single process " << expected[i]);
    CHECK(std::abs(r.losses[i] - expected[i]) <= 1e-4 * std::abs(expected[i]));
  }
  // Training moved: step 5's loss is below step 1's (a run that never updates would
  // match the reference's first step only).
  CHECK(r.losses.back() < r.losses.front() - 0.05);
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

TEST_CASE("multi-rank: pipeline 2 with the LM head on stage 0", "[backend][multirank]") {
  check_equivalent("--set pipeline_parallel_degree=2 --set lm_head_stage=first", 2);
}

TEST_CASE("multi-rank: data parallel 2", "[backend][multirank]") {
  check_equivalent("", 2);
}

TEST_CASE("multi-rank: data parallel 2 with SGD", "[backend][multirank]") {
  check_equivalent("", 2, "--set optimizer=sgd");
}

TEST_CASE("multi-rank: sharded data parallel 2", "[backend][multirank]") {
  check_equivalent("--set sharded_data_parallel_degree=2", 2);
}

TEST_CASE("multi-rank: optimizer-state sharding over data parallel 2", "[backend][multirank]") {
  check_equivalent("--set shard_optimizer_state=true", 2);
}

TEST_CASE("multi-rank: activation checkpointing, full and selective", "[backend][multirank]") {
  check_equivalent("--set activation_checkpointing=full", 2);
  check_equivalent("--set activation_checkpointing=selective --set pipeline_parallel_degree=2", 2);
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
  for (const std::string layout : {kFour + "--set pipeline_parallel_degree=2 --set shard_optimizer_state=true",
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
