// Megatron-Core's pipeline layout strings (pipeline_layout.hpp) read by hand, the job key
// that takes one, and cluster.domain_nodes.
#include <catch2/catch.hpp>

#include <numeric>
#include <stdexcept>
#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/pipeline_layout.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;

TEST_CASE("pipeline layouts: chunks and layers as Megatron's recipes write them", "[pipeline][layout]") {
  // DeepSeek-V3 on H100 (the MoE model zoo): embedding + 1, thirty chunks of 2, MTP + loss.
  const PipelineLayout h100 = parse_pipeline_layout("Et|(tt|)*30mL");
  REQUIRE(h100.chunk_layers.size() == 32);
  CHECK(h100.chunk_layers.front() == 1);
  CHECK(h100.chunk_layers[1] == 2);
  CHECK(h100.chunk_layers[30] == 2);
  CHECK(h100.chunk_layers.back() == 0);
  CHECK(h100.mtp_layers == 1);
  // The long-context layout: 2, twenty-two 2s, 1, seven 2s, then MTP + loss: 61 layers.
  const PipelineLayout lc = parse_pipeline_layout("Et*2|(tt|)*22t|(tt|)*7mL");
  CHECK(lc.chunk_layers.size() == 32);
  CHECK(std::accumulate(lc.chunk_layers.begin(), lc.chunk_layers.end(), 0) == 61);
  CHECK(lc.chunk_layers[23] == 1);
  // GB200: 4, fourteen 4s, 1 + MTP + loss.
  const PipelineLayout gb = parse_pipeline_layout("Et*4|(tttt|)*14tmL");
  CHECK(gb.chunk_layers == std::vector<int>{4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 1});
  for (const char* bad : {"tt|EtL", "Ett|tt", "Et|tL|t", "Et|(tt|*3L", "Et|tx|L", "Et*0|L"})
    CHECK_THROWS_AS(parse_pipeline_layout(bad), std::invalid_argument);
}

namespace {
Job dsv3(const std::string& parallel, const std::string& cluster = "{instance_type: p5.48xlarge, nodes: 128}") {
  return parse_job("kind: job\nname: t\nmodel: deepseek-v3\ncluster: " + cluster +
                       "\ntraining: {global_batch: 8192, precision: fp8}\n"
                       "parallel: {tensor_parallel_degree: 2, pipeline_parallel_degree: 8, sequence_parallel: true,\n"
                       "           expert_parallel_degree: 64, expert_tensor_parallel_degree: 1, microbatches: 128,\n"
                       "           placement_strategy: PDT, " +
                       parallel + "}\n",
                   "layout.yaml");
}
std::string refusal(const std::string& parallel) {
  try {
    dsv3(parallel);
  } catch (const ScenarioError& e) {
    return e.key() + ": " + e.reason();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("parallel.pipeline_layout sets the chunks' layers and the virtual stages", "[pipeline][layout]") {
  const Job j = dsv3("pipeline_layout: \"Et|(tt|)*30L\"");
  CHECK(j.parallel.virtual_stages == 4);
  CHECK(j.parallel.stage_layers.size() == 32);
  CHECK(j.layers_in_chunk(0, 0) == 1);  // model chunk 0: the embedding's
  CHECK(j.layers_in_chunk(7, 3) == 0);  // model chunk 31 (3 x 8 + 7): the loss's
  CHECK(j.layers_on_stage(0) == 1 + 2 + 2 + 2);
  // Written back as the layout, read again alike.
  const Job again = parse_job(job_yaml(j, "test"), "again.yaml");
  CHECK(again.parallel.stage_layers == j.parallel.stage_layers);
  CHECK(again.parallel.pipeline_layout == "Et|(tt|)*30L");
  // The recipe's 'm' needs the model's MTP layer (model.mtp_layers; the preset has none).
  CHECK_THAT(refusal("pipeline_layout: \"Et|(tt|)*30mL\""), Catch::Contains("the model has none (model.mtp_layers)"));
  CHECK_THAT(refusal("pipeline_layout: \"Et|(tt|)*29L\""), Catch::Contains("31 model chunks"));
  CHECK_THAT(refusal("pipeline_layout: \"Et|(tt|)*30L\", virtual_stages: 2"), Catch::Contains("not virtual_stages 2"));
  CHECK_THAT(refusal("pipeline_layout: \"Et|(tt|)*30L\", stage_layers: [61]"), Catch::Contains("keep one"));
}

TEST_CASE("cluster.domain_nodes: runs of this many trays share an NVLink domain", "[cluster][nvlink]") {
  const Job whole = dsv3("pipeline_layout: \"Et|(tt|)*30L\"", "{instance_type: p6e-gb200.36xlarge, nodes: 256}");
  CHECK(whole.cluster.instance.fabric_gpus() == 72);
  const Job eight =
      dsv3("pipeline_layout: \"Et|(tt|)*30L\"", "{instance_type: p6e-gb200.36xlarge, nodes: 256, domain_nodes: 8}");
  CHECK(eight.cluster.instance.fabric_gpus() == 32);
  CHECK(parse_job(job_yaml(eight, "test"), "again.yaml").cluster.instance.fabric_gpus() == 32);
  try {
    dsv3("pipeline_layout: \"Et|(tt|)*30L\"", "{instance_type: p5.48xlarge, nodes: 128, domain_nodes: 2}");
    FAIL("domain_nodes on an instance type whose domain is a node was accepted");
  } catch (const ScenarioError& e) {
    CHECK(e.key() == "cluster.domain_nodes");
  }
}

TEST_CASE("a layout whose chunks hold the wrong layer count is refused at pipeline_layout", "[pipeline][layout]") {
  // 1 + 30 x 2 + 1 = 62 layers for DeepSeek-V3's 61: the job rules name the layout, not stage_layers.
  CHECK_THAT(refusal("pipeline_layout: \"Et|(tt|)*30tL\""),
             Catch::StartsWith("parallel.pipeline_layout") && Catch::Contains("62 layers"));
}
