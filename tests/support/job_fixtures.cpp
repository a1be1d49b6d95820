#include "job_fixtures.hpp"

#include <catch2/catch.hpp>

namespace partune::testing {

ModelSpec make_model(int layers, int hidden, int heads, int ffn, int vocab, int seq) {
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

Job p4d_job(const std::string& model, int nodes, int global_batch) {
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

void require_valid(const Job& j) {
  const JobViolation v = check_job(j);
  INFO("check_job: " << v.key << ": " << v.reason);
  REQUIRE_FALSE(v);
}

std::string scenario_error_key(const std::string& text, const std::string& file,
                               const std::vector<std::string>& overrides) {
  try {
    parse_job(text, file, overrides);
  } catch (const ScenarioError& e) {
    return e.key();
  }
  return "(no error)";
}

}  // namespace partune::testing
