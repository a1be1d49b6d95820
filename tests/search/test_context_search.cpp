// Context parallelism in the search (issue 30): LLaMA-3 70B at 128k tokens on 32 p5
// nodes. Without context parallelism a sequence fits only with full checkpointing and a
// deep pipeline, and runs slower: the winner splits the sequence; its activation memory
// is the same job's without context parallelism divided by the context degree.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/search/space.hpp"
#include "partune/search/tuner.hpp"

using namespace partune;
using namespace partune::search;

namespace {

Job long_job() { return load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/llama-3-70b-128k-p5.yaml"); }

}  // namespace

TEST_CASE("the default space splits long sequences only", "[context][search]") {
  Job job = long_job();
  SearchSpace space;
  for (const char* f : {"tensor_parallel_degree=8", "pipeline_parallel_degree=4", "placement_strategy=DPT",
                        "activation_checkpointing=full", "flash_attention=true", "sequence_parallel=true",
                        "shard_optimizer_state=true", "offload_activations=false", "pipeline=interleaved",
                        "virtual_stages=1", "microbatch_size=1", "checkpointed_layers=all"})
    restrict_space(space, f);
  // 256 GPUs / (tensor 8 x pipeline 4) = a data axis of 8: context 1, 2, 4 and 8 (each
  // at least 4096 tokens of 131072), p2p only for LLaMA-3 70B (a2a would split one
  // key/value head per tensor rank).
  std::vector<int> seen;
  enumerate(job, space, [&](const Point& p) { seen.push_back(p.context); });
  CHECK(seen == std::vector<int>{1, 2, 4, 8});
  // At 4096 tokens no sequence is split by default.
  job.model.seq_len = 4096;
  seen.clear();
  enumerate(job, space, [&](const Point& p) { seen.push_back(p.context); });
  CHECK(seen == std::vector<int>{1});
}

TEST_CASE("LLaMA-3 70B at 128k tokens: the search's winner uses context parallelism", "[context][search]") {
  const Job job = long_job();
  SearchSpace space;
  for (const char* f : {"tensor_parallel_degree=8", "placement_strategy=DPT", "flash_attention=true",
                        "sequence_parallel=true", "offload_activations=false", "pipeline_parallel_degree=1,2,4,8",
                        "virtual_stages=1"})
    restrict_space(space, f);
  SearchOptions options;
  options.top_k = 4;
  const SearchReport report = run_search(job, space, options);
  REQUIRE_FALSE(report.ranked.empty());
  const Candidate& best = report.ranked.front();
  INFO(best.configuration);
  CHECK(best.job.parallel.context_parallel_degree > 1);
  // Without context parallelism a sequence fits only with every layer checkpointed (and
  // slower): every such point was pruned, for memory or beaten by a faster one.
  long unsplit = 0;
  double fastest_unsplit = 1e300;
  for (const Pruned& p : report.pruned)
    if (p.point.context == 1) {
      ++unsplit;
      if (p.stage == Pruned::Stage::dominated) fastest_unsplit = std::min(fastest_unsplit, p.step_time);
    }
  CHECK(unsplit > 0);
  for (const Candidate& c : report.ranked) CHECK(c.job.parallel.context_parallel_degree > 1);
  CHECK(fastest_unsplit > best.estimate.step_time);
  // The winner's activations per GPU: the same configuration's without context
  // parallelism, divided by the context degree (every layer keeps s / cp tokens).
  Job unsplit_job = best.job;
  const int cp = best.job.parallel.context_parallel_degree;
  unsplit_job.parallel.context_parallel_degree = 1;
  // (cp x more replicas, each with the same micro-batches of the same size)
  unsplit_job.training.global_batch = best.job.training.global_batch * cp;
  REQUIRE(unsplit_job.microbatch_size() == best.job.microbatch_size());
  const MemoryBreakdown split = peak_memory(best.job), whole = peak_memory(unsplit_job);
  CHECK(split.activations == Approx(whole.activations / cp).epsilon(1e-9));
}
