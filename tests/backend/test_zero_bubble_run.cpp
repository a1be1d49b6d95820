// The zero-bubble schedule ZB-H1 on the backend (`partune run`, processes over Gloo)
// against the one-process run of the same job (multirank_runs.hpp): each backward split
// into its input gradients (the program's `backward`, sent to the previous stage at once)
// and its weight gradients (`backward_weight`, deferred: the projections' dW = dY^T X run
// later from the store their backward filled, weight_gradients.hpp). With tensor and
// sequence parallelism (the gathered GEMM defers its dW too), data parallelism (the
// gradient buckets follow the W's), full checkpointing, experts and GPT's tied embedding
// on two pipeline ends; and ZBV and DualPipeV, two chunks a stage in a V. Every step's loss
// within 1e-4 over 5 steps.
#include <string>

#undef CHECK
#include <catch2/catch.hpp>

#include "multirank_runs.hpp"

namespace {
const std::string kLlama = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-llama.yaml";
const std::string kGpt = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-parallel.yaml";
const std::string kMoe = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-moe.yaml";
const std::string kFour = " --set 'instance_type={base: local-cpu, gpus_per_node: 4}'";
const std::string kZb = " --set pipeline=zb-h1 --set pipeline_parallel_degree=2";
constexpr int kSteps = 5;
}  // namespace

TEST_CASE("zero bubble multi-rank: ZB-H1 over 2 stages, and with full checkpointing", "[backend][multirank][zb]") {
  partune::test::check_equivalent(kLlama, kZb, 2, "", kSteps);
  partune::test::check_equivalent(kLlama, kZb + " --set activation_checkpointing=full", 2, "", kSteps);
}

TEST_CASE("zero bubble multi-rank: ZB-H1 with tensor 2 and sequence parallelism, and beside data 2",
          "[backend][multirank][zb]") {
  partune::test::check_equivalent(kLlama, kFour + kZb + " --set tensor_parallel_degree=2 --set sequence_parallel=true",
                                  4, "", kSteps);
  partune::test::check_equivalent(kLlama, kFour + kZb + " --set microbatches=4", 4, "", kSteps);
}

TEST_CASE("zero bubble multi-rank: ZB-H1 with experts, and GPT's tied embedding", "[backend][multirank][zb]") {
  partune::test::check_equivalent(kMoe, kZb, 2, "", kSteps);
  partune::test::check_equivalent(kGpt, kZb, 2, "", kSteps);
}

TEST_CASE("zero bubble multi-rank: ZBV and DualPipeV in a V over 2 stages", "[backend][multirank][zb]") {
  // Four layers in four chunks: stage 0 runs layers 0 and 3 (the embedding and the head),
  // stage 1 layers 1 and 2, handing layer 1's output to its own layer 2 (the V's turn).
  const std::string four = " --set model.layers=4";
  for (const char* schedule : {"zbv", "dualpipev"})
    partune::test::check_equivalent(
        kLlama, std::string(" --set pipeline=") + schedule + " --set pipeline_parallel_degree=2 --set microbatches=4",
        2, four, kSteps);
  // With tensor 2 and sequence parallelism; and GPT's tied embedding, one copy on stage 0.
  partune::test::check_equivalent(kLlama,
                                  kFour + " --set pipeline=zbv --set pipeline_parallel_degree=2 --set microbatches=4"
                                          " --set tensor_parallel_degree=2 --set sequence_parallel=true",
                                  4, four, kSteps);
  partune::test::check_equivalent(kGpt, " --set pipeline=zbv --set pipeline_parallel_degree=2 --set microbatches=4", 2,
                                  "", kSteps);
}
