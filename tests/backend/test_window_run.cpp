// gpt-oss's attention on the backend (`partune run`, processes over Gloo) against the
// one-process run of the same job (multirank_runs.hpp): tiny-llama with a sliding window
// of 8 positions on every other layer (full_attention_every 2) and attention sinks, over
// tensor 2 (the sinks split with the heads), with sequence parallelism, pipeline 2 and
// data 2; every step's loss within 1e-4 over 5 steps. The window and the sinks change
// what is computed: the window alone changes the one-process loss.
#include <cmath>
#include <string>

#undef CHECK
#include <catch2/catch.hpp>

#include "multirank_runs.hpp"

namespace {
const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-llama.yaml";
const std::string kGptOss = "--set model.sliding_window=8 --set model.full_attention_every=2 --set model.attention_sinks=true";
constexpr int kSteps = 5;
}  // namespace

TEST_CASE("window multi-rank: sliding window and sinks over tensor 2, pipeline 2 and data 2",
          "[backend][multirank][window]") {
  partune::test::check_equivalent(kJob, "--set tensor_parallel_degree=2", 2, kGptOss, kSteps);
  partune::test::check_equivalent(kJob, "--set tensor_parallel_degree=2 --set sequence_parallel=true", 2, kGptOss,
                                  kSteps);
  partune::test::check_equivalent(kJob, "--set pipeline_parallel_degree=2", 2, kGptOss, kSteps);
  partune::test::check_equivalent(kJob, "", 2, kGptOss, kSteps);
  // Not a no-op: with the same initial weights (no sinks: no more parameters drawn) the
  // window alone changes the first step's loss.
  const std::string window_only = "--set model.sliding_window=8 --set model.full_attention_every=2";
  const double windowed = partune::test::reference_losses(kJob, window_only, kSteps).front();
  const double plain = partune::test::reference_losses(kJob, "", kSteps).front();
  CHECK(std::abs(windowed - plain) > 1e-6);
}
