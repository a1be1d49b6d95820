// A mixture of experts on the backend (`partune run`, processes over Gloo) against the
// one-process run of the same job (multirank_runs.hpp): expert parallelism 2 (each rank
// holds 2 of the 4 experts and exchanges tokens with all-to-alls), the experts replicated
// over data parallelism, and expert parallelism with tensor and pipeline parallelism;
// every step's loss within 1e-4. The program's expert instructions stand for the layers'
// exchanges (run_job checks that no call went unbooked). Also DeepSeek's shape: shared
// experts and a dense first layer.
#include <string>

#undef CHECK
#include <catch2/catch.hpp>

#include "multirank_runs.hpp"

namespace {
const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-moe.yaml";
constexpr int kSteps = 4;
}  // namespace

TEST_CASE("moe multi-rank: expert parallelism 2 over data parallelism 2", "[backend][multirank][moe]") {
  partune::test::check_equivalent(kJob, "--set expert_parallel_degree=2", 2, "", kSteps);
}

TEST_CASE("moe multi-rank: experts replicated over data parallelism 2", "[backend][multirank][moe]") {
  partune::test::check_equivalent(kJob, "", 2, "", kSteps);
}

TEST_CASE("moe multi-rank: experts split over tensor 2 within expert groups of 2", "[backend][multirank][moe]") {
  partune::test::check_equivalent(
      kJob, "--set 'instance_type={base: local-cpu, gpus_per_node: 4}' --set tensor_parallel_degree=2 --set expert_parallel_degree=2",
      4, "", kSteps);
}

TEST_CASE("moe multi-rank: pipeline 2 (1F1B) with expert parallelism 2", "[backend][multirank][moe]") {
  partune::test::check_equivalent(
      kJob, "--set 'instance_type={base: local-cpu, gpus_per_node: 4}' --set pipeline_parallel_degree=2 --set expert_parallel_degree=2",
      4, "", kSteps);
}

// DeepSeek's block shape: shared experts (a dense SwiGLU of 96 beside the routed ones,
// split over the tensor group inside the MLP's region) and a dense first layer
// (first_dense_layers 1: layer 0 has ffn_hidden's MLP, layer 1 the experts).
TEST_CASE("moe multi-rank: shared experts and a dense first layer over expert 2 and tensor 2",
          "[backend][multirank][moe]") {
  const std::string deepseek = "--set model.shared_expert_ffn_hidden=96 --set model.first_dense_layers=1";
  partune::test::check_equivalent(kJob, "--set expert_parallel_degree=2", 2, deepseek, kSteps);
  partune::test::check_equivalent(
      kJob, "--set 'instance_type={base: local-cpu, gpus_per_node: 4}' --set tensor_parallel_degree=2 --set expert_parallel_degree=2",
      4, deepseek, kSteps);
}
