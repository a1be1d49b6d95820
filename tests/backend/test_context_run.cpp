// Context parallelism on the backend (`partune run`, processes over Gloo) against the
// one-process run of the same job (multirank_runs.hpp): each sequence split over 2 ranks
// (chunks 0 and 3 of 4 on one, 1 and 2 on the other), keys and values passed around the
// ring (p2p), gathered (allgather) or the heads exchanged (a2a); with tensor parallelism
// and sequence parallelism, with pipeline, data and expert parallelism beside it, and GPT's
// learned positions.
// Every step's loss within 1e-4 over 5 steps; the program's context instructions stand for
// the layers' exchanges (run_job checks that no call went unbooked).
#include <string>

#undef CHECK
#include <catch2/catch.hpp>

#include "multirank_runs.hpp"

namespace {
const std::string kLlama = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-llama.yaml";
const std::string kGpt = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-parallel.yaml";
const std::string kFour = " --set 'instance_type={base: local-cpu, gpus_per_node: 4}'";
constexpr int kSteps = 5;
}  // namespace

TEST_CASE("context multi-rank: context 2 by p2p, a2a and allgather", "[backend][multirank][context]") {
  for (const char* comm : {"p2p", "a2a", "allgather"})
    partune::test::check_equivalent(kLlama, std::string("--set context_parallel_degree=2 --set cp_comm_type=") + comm, 2,
                                    "", kSteps);
}

TEST_CASE("context multi-rank: context 2 with tensor 2 and sequence parallelism", "[backend][multirank][context]") {
  partune::test::check_equivalent(
      kLlama, kFour + " --set context_parallel_degree=2 --set tensor_parallel_degree=2 --set sequence_parallel=true", 4,
      "", kSteps);
}

TEST_CASE("context multi-rank: context 2 with pipeline 2 (1F1B), and with expert parallelism",
          "[backend][multirank][context]") {
  // Each stage hands on the rank's s / cp tokens.
  partune::test::check_equivalent(kLlama, kFour + " --set context_parallel_degree=2 --set pipeline_parallel_degree=2", 4,
                                  "", kSteps);
  // Expert groups of 2 over the data axis (data 1 x context 2): each rank routes its own
  // tokens.
  const std::string moe = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-moe.yaml";
  partune::test::check_equivalent(moe, "--set context_parallel_degree=2 --set expert_parallel_degree=2", 2, "", kSteps);
}

TEST_CASE("context multi-rank: context 2 beside data 2, learned positions", "[backend][multirank][context]") {
  partune::test::check_equivalent(kLlama, kFour + " --set context_parallel_degree=2 --set cp_comm_type=a2a", 4, "",
                                  kSteps);
  partune::test::check_equivalent(kGpt, "--set context_parallel_degree=2", 2, "", kSteps);
}
