// An NVLink domain larger than a node in the search (issue 31): Qwen3-30B-A3B (128
// experts) on 64 GPUs, at 4096 tokens. On 16 GB200 trays (one 72-GPU NVLink domain) the
// search splits the experts over groups larger than a node; on 8 p6-b200 nodes it keeps
// its expert groups inside a node. The simulator shows what the domain saves: the NVL72
// winner's layout on 8-GPU nodes sends its all-to-alls over EFA and runs slower.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/scenario.hpp"
#include "partune/search/space.hpp"
#include "partune/search/tuner.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;
using namespace partune::search;

namespace {

Job qwen(const std::string& instance, int nodes) {
  return parse_job("kind: job\nname: qwen\nmodel: {base: qwen3-30b-a3b, seq_len: 4096}\n"
                   "cluster: {instance_type: " + instance + ", nodes: " + std::to_string(nodes) +
                       "}\ntraining: {global_batch: 512, precision: bf16}\n"
                       "parallel: {flash_attention: true, shard_optimizer_state: true}\n",
                   "qwen.yaml");
}

// Everything but the expert degree (and the micro-batches) pinned, to keep the search short.
SearchSpace expert_space() {
  SearchSpace space;
  for (const char* f : {"tensor_parallel_degree=1", "pipeline_parallel_degree=1", "activation_checkpointing=none",
                        "flash_attention=true", "shard_optimizer_state=true", "offload_activations=false",
                        "sharded_data_parallel_degree=1", "context_parallel_degree=1"})
    restrict_space(space, f);
  return space;
}

}  // namespace

TEST_CASE("on NVL72 the search picks expert groups larger than a node, on 8-GPU nodes not", "[search][nvlink][moe]") {
  SearchOptions options;
  options.top_k = 4;
  const SearchReport nvl72 = run_search(qwen("p6e-gb200.36xlarge", 16), expert_space(), options);
  const SearchReport b200 = run_search(qwen("p6-b200.48xlarge", 8), expert_space(), options);
  REQUIRE_FALSE(nvl72.ranked.empty());
  REQUIRE_FALSE(b200.ranked.empty());
  const Job& wide = nvl72.ranked.front().job;
  INFO("NVL72: " << describe(wide) << "; p6-b200: " << describe(b200.ranked.front().job));
  CHECK(wide.parallel.expert_parallel_degree > 8);
  CHECK(b200.ranked.front().job.parallel.expert_parallel_degree <= 8);
  // The NVL72 winner's layout on 8-GPU nodes: its expert all-to-alls cross EFA.
  Job across = wide;
  across.cluster = qwen("p6-b200.48xlarge", 8).cluster;
  const sim::SimResult on_domain = sim::simulate(wide), on_nodes = sim::simulate(across);
  // The all-to-alls are the layers' (tensor-line) exchanges: several times longer
  // across EFA, and the step with them.
  CHECK(on_nodes.exposed.tensor > 4 * on_domain.exposed.tensor);
  CHECK(on_nodes.metrics.step_time > on_domain.metrics.step_time);
}
