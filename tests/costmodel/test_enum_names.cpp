// One table of names per enum: to_string, the loader and the writer spell every value the
// same way, and the names are the documented ones (docs/scenarios, written out here).
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;

namespace {

const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/gpt3-175b-p4d-120.yaml";

// Each value's documented name, in the order the loader lists them.
template <typename E>
void check_table(const std::vector<std::pair<E, std::string>>& expected) {
  const auto& table = enum_names<E>();
  REQUIRE(table.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& [value, name] = expected[i];
    INFO(name);
    CHECK(table[i].value == value);
    CHECK(std::string(to_string(value)) == name);
    CHECK(enum_value<E>(name) == value);
  }
  CHECK_FALSE(enum_value<E>("no-such-name").has_value());
}

// key=name through the loader, then through the writer and the loader again.
template <typename E>
void check_round_trip(const std::string& key, const std::vector<std::pair<E, std::string>>& expected,
                      E (*field)(const Job&)) {
  for (const auto& [value, name] : expected) {
    INFO(key << "=" << name);
    const Job job = load_job(kJob, {key + "=" + name, "tensor_parallel_degree=8", "pipeline_parallel_degree=8"});
    CHECK(field(job) == value);
    const std::string text = job_yaml(job, "a test");
    CHECK_THAT(text, Catch::Contains(key.substr(key.find('.') + 1) + ": " + name));
    CHECK(field(parse_job(text, "written.yaml")) == value);
  }
}

}  // namespace

TEST_CASE("every enum value has one name, shared by to_string, the loader and the writer", "[enum_names]") {
  const std::vector<std::pair<Precision, std::string>> precision = {
      {Precision::fp32, "fp32"}, {Precision::tf32, "tf32"}, {Precision::fp16, "fp16"}, {Precision::bf16, "bf16"},
      {Precision::fp8, "fp8"},   {Precision::mxfp8, "mxfp8"}, {Precision::fp4, "fp4"}};
  // The round trip loads an A100 job: every precision but the 8- and 4-bit ones (no such
  // peaks there).
  const std::vector<std::pair<Precision, std::string>> precision_on_a100(precision.begin(), precision.end() - 3);
  const std::vector<std::pair<Optimizer, std::string>> optimizer = {{Optimizer::adam, "adam"}, {Optimizer::sgd, "sgd"}};
  const std::vector<std::pair<PipelineSchedule, std::string>> pipeline = {
      {PipelineSchedule::gpipe, "simple"}, {PipelineSchedule::one_f_one_b, "interleaved"},
      {PipelineSchedule::zb_h1, "zb-h1"},   {PipelineSchedule::zbv, "zbv"},
      {PipelineSchedule::dualpipev, "dualpipev"}};
  const std::vector<std::pair<Checkpointing, std::string>> checkpointing = {
      {Checkpointing::none, "none"}, {Checkpointing::selective, "selective"}, {Checkpointing::full, "full"},
      {Checkpointing::op, "op"}, {Checkpointing::dots, "dots"}};
  const std::vector<std::pair<CollectiveAlgorithm, std::string>> algorithm = {
      {CollectiveAlgorithm::ring, "ring"},
      {CollectiveAlgorithm::tree, "tree"},
      {CollectiveAlgorithm::hierarchical, "hierarchical"},
      {CollectiveAlgorithm::all_to_all, "all_to_all"},
      {CollectiveAlgorithm::nccl, "nccl"},
      {CollectiveAlgorithm::nvls, "nvls"}};
  const std::vector<std::pair<LmHeadStage, std::string>> head = {{LmHeadStage::last, "last"},
                                                                 {LmHeadStage::first, "first"}};
  const std::vector<std::pair<AttentionKind, std::string>> attention = {
      {AttentionKind::mha, "mha"}, {AttentionKind::gqa, "gqa"}, {AttentionKind::mqa, "mqa"}, {AttentionKind::mla, "mla"}};

  SECTION("the tables") {
    check_table(precision);
    check_table(optimizer);
    check_table(pipeline);
    check_table(checkpointing);
    check_table(algorithm);
    check_table(head);
    check_table(attention);
  }
  SECTION("loaded from a job and written back") {
    check_round_trip<Precision>("training.precision", precision_on_a100,
                                [](const Job& j) { return j.training.precision; });
    check_round_trip<Optimizer>("training.optimizer", optimizer, [](const Job& j) { return j.training.optimizer; });
    check_round_trip<PipelineSchedule>("parallel.pipeline", pipeline, [](const Job& j) { return j.parallel.pipeline; });
    check_round_trip<Checkpointing>("parallel.activation_checkpointing", checkpointing,
                                    [](const Job& j) { return j.parallel.activation_checkpointing; });
    check_round_trip<CollectiveAlgorithm>("parallel.data_parallel_collective", algorithm,
                                          [](const Job& j) { return j.parallel.data_parallel_collective; });
    check_round_trip<CollectiveAlgorithm>("parallel.sharded_collective", algorithm,
                                          [](const Job& j) { return j.parallel.sharded_collective; });
    check_round_trip<LmHeadStage>("parallel.lm_head_stage", head, [](const Job& j) { return j.parallel.lm_head_stage; });
  }
  SECTION("a name outside the table: the loader lists the table's names in order") {
    try {
      load_job(kJob, {"pipeline=zigzag"});
      FAIL("no error");
    } catch (const ScenarioError& e) {
      CHECK(e.key() == "parallel.pipeline");
      CHECK(e.reason() == "'zigzag' is not one of: simple, interleaved, zb-h1, zbv, dualpipev");
    }
    try {
      load_job(kJob, {"precision=fp6"});
      FAIL("no error");
    } catch (const ScenarioError& e) {
      CHECK(e.reason() == "'fp6' is not one of: fp32, tf32, fp16, bf16, fp8, mxfp8, fp4");
    }
  }
}
