#pragma once
// Small helpers shared by the cost-model, simulator and search tests (partune_test_support):
// jobs built in C++ from the shipped presets (p4d.24xlarge, gpt3-175b, gpt2-small) and
// hand-built models/instances.
#include <string>
#include <vector>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/scenario.hpp"

namespace partune::testing {

// A bare ModelSpec with standard multi-head attention.
ModelSpec make_model(int layers, int hidden, int heads, int ffn, int vocab, int seq);

// A job on `nodes` p4d.24xlarge nodes. Parallel knobs are left at their defaults
// (pp 1, tp 1, 1 micro-batch, 1F1B, cluster placement); callers set what they test.
Job p4d_job(const std::string& model, int nodes, int global_batch);

// Fails the test (with the violation) when the job is inconsistent.
void require_valid(const Job& j);

// The key a job text is refused at (ScenarioError::key), or "(no error)".
std::string scenario_error_key(const std::string& text, const std::string& file,
                               const std::vector<std::string>& overrides = {});

}  // namespace partune::testing
