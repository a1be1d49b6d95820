#pragma once
// Small helpers shared by the cost-model tests: jobs built in C++ from the shipped
// presets (p4d.24xlarge, gpt3-175b, gpt2-small) and hand-built models/instances.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/scenario.hpp"

namespace partune::testing {

// A bare ModelSpec with standard multi-head attention.
inline ModelSpec make_model(int layers, int hidden, int heads, int ffn, int vocab, int seq) {
  ModelSpec m;
  m.name = "hand";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = ffn;
  m.vocab = vocab;
  m.seq_len = seq;
  return m;
}

// A job on `nodes` p4d.24xlarge nodes. Parallel knobs are left at their defaults
// (pp 1, tp 1, 1 micro-batch, 1F1B, cluster placement); callers set what they test.
inline Job p4d_job(const std::string& model, int nodes, int global_batch) {
  Job j;
  j.name = "test";
  j.model = load_model(model);
  j.cluster.instance = load_instance_type("p4d.24xlarge");
  j.cluster.nodes = nodes;
  j.training.global_batch = global_batch;
  j.training.precision = Precision::fp16;
  j.training.optimizer = Optimizer::adam;
  return j;
}

// Fails the test (with the violation) when the job is inconsistent.
inline void require_valid(const Job& j) {
  const JobViolation v = check_job(j);
  INFO("check_job: " << v.key << ": " << v.reason);
  REQUIRE_FALSE(v);
}

// The key a job text is refused at (ScenarioError::key), or "(no error)".
inline std::string scenario_error_key(const std::string& text, const std::string& file,
                                      const std::vector<std::string>& overrides = {}) {
  try {
    parse_job(text, file, overrides);
  } catch (const ScenarioError& e) {
    return e.key();
  }
  return "(no error)";
}

}  // namespace partune::testing
