// parallel.overlap_p2p_comm (issue 29): Megatron-core posts each pipeline receive before the
// compute ahead of it, so a hop travels while that compute runs. The programs flag the
// receives; the estimator charges the steady state's hops only for what a chunk's forward
// does not cover, and the fill's in full.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/program_text.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

namespace {

// GPT-3 2.7B in 4 stages of 2 virtual stages over 4 p5 nodes, one stage a node (PDT).
Job pipeline_job(bool overlap) {
  return parse_job(std::string("model: gpt3-2.7b\ncluster: {instance_type: p5.48xlarge, nodes: 4}\n"
                               "training: {global_batch: 64, precision: bf16}\n"
                               "parallel: {pipeline_parallel_degree: 4, tensor_parallel_degree: 8, microbatches: 16,\n"
                               "           virtual_stages: 2, placement_strategy: PDT, overlap_p2p_comm: ") +
                       (overlap ? "true" : "false") + "}\n",
                   "overlap.yaml");
}

}  // namespace

TEST_CASE("overlap_p2p_comm flags every pipeline receive, and only those", "[program][overlap]") {
  for (bool overlap : {false, true}) {
    INFO("overlap_p2p_comm " << overlap);
    int receives = 0, flagged = 0;
    for (const RankProgram& p : build_programs(pipeline_job(overlap)))
      for (const Instruction& in : p.ops) {
        const bool receive = in.kind == OpKind::recv_activation || in.kind == OpKind::recv_gradient;
        receives += receive;
        flagged += in.posted_early;
        if (in.posted_early) CHECK(receive);
        if (in.posted_early) CHECK(instruction_text(in).find("early") != std::string::npos);
      }
    CHECK(receives > 0);
    CHECK(flagged == (overlap ? receives : 0));
  }
}

TEST_CASE("overlapped pipeline hops cost only the fill's, when a chunk's forward covers a hop", "[estimator][overlap]") {
  const Estimate plain = estimate(pipeline_job(false)), overlapped = estimate(pipeline_job(true));
  // Blocking: 2 (m v + p - 1) hops; overlapped: the fill's 2 (p - 1). With m = 16, v = 2,
  // p = 4 that is 6 of 70 (a hop of 4 MiB at 50 GB/s is ~0.1 ms, a chunk's forward ms).
  REQUIRE(plain.breakdown.pipeline_p2p > 0);
  CHECK(overlapped.breakdown.pipeline_p2p == Approx(plain.breakdown.pipeline_p2p * 6.0 / 70.0).epsilon(1e-9));
  CHECK(overlapped.step_time == Approx(plain.step_time - plain.breakdown.pipeline_p2p * 64.0 / 70.0).epsilon(1e-9));
}
