// The search's memos (plan_memo.hpp, cost_memo.hpp, remembered_schedule_steps) change no
// figure: with them, every estimate is the one computed without them, in any order of
// configurations; a memo serves only the model object it was made for; and a remembered
// schedule is the one built afresh.
#include <catch2/catch.hpp>

#include <tuple>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/cost_memo.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/plan_memo.hpp"
#include "partune/costmodel/schedule.hpp"

using namespace partune;

namespace {

struct Knobs {
  int tp, pp, microbatches;
  bool sp, flash;
  PipelineSchedule schedule;
  Checkpointing ckpt;
};

// GPT-3 175B on 64 p4d: configurations that share some plans and differ in others
// (tensor degree, micro-batch size, sequence parallelism, FlashAttention).
std::vector<Knobs> configurations() {
  std::vector<Knobs> out;
  for (int tp : {4, 8})
    for (int pp : {8, 16})
      for (int m : {16, 32})
        for (bool sp : {false, true})
          for (PipelineSchedule s : {PipelineSchedule::interleaved, PipelineSchedule::zb_h1, PipelineSchedule::zbv})
            if (s != PipelineSchedule::zbv || m >= 2 * pp)  // a V needs two micro-batches a stage
              out.push_back({tp, pp, m, sp, m == 32, s, sp ? Checkpointing::selective : Checkpointing::full});
  return out;
}

void apply(const Knobs& k, Job& job) {
  job.parallel.tensor_parallel_degree = k.tp;
  job.parallel.pipeline_parallel_degree = k.pp;
  job.parallel.microbatches = k.microbatches;
  job.parallel.sequence_parallel = k.sp;
  job.parallel.flash_attention = k.flash;
  job.parallel.pipeline = k.schedule;
  job.parallel.virtual_stages = k.schedule == PipelineSchedule::zb_h1 ? 1 : 2;  // interleaved over 2 chunks, or a V
  job.parallel.activation_checkpointing = k.ckpt;
}

}  // namespace

TEST_CASE("estimates under the search's memos equal those without, in any order") {
  Job job = testing::p4d_job("gpt3-175b", 64, 512);
  const std::vector<Knobs> all = configurations();
  std::vector<std::tuple<double, double, bool>> fresh;
  for (const Knobs& k : all) {
    apply(k, job);
    REQUIRE_FALSE(check_job(job));
    const Estimate e = estimate(job);
    fresh.emplace_back(e.step_time, e.memory.total(), e.fits);
  }
  const CostMemo memo(job.model, job.cluster.instance.gpu);
  for (int round = 0; round < 2; ++round)  // the second round is served from the memos
    for (std::size_t i = all.size(); i-- > 0;) {
      apply(all[i], job);
      const Estimate e = estimate(job);
      INFO("configuration " << i << ", round " << round);
      CHECK(e.step_time == std::get<0>(fresh[i]));
      CHECK(e.memory.total() == std::get<1>(fresh[i]));
      CHECK(e.fits == std::get<2>(fresh[i]));
    }
}

TEST_CASE("a plan memo serves only the model object it was made for") {
  // A GPT layer at tensor degree 1 holds 12 h^2 + 13 h parameters (QKV 3h^2 + 3h, the
  // projection h^2 + h, fc1 4h^2 + 4h, fc2 4h^2 + h, two LayerNorms 4h).
  auto layer_params = [](double h) { return 12 * h * h + 13 * h; };
  const ModelSpec small = testing::make_model(4, 1024, 16, 4096, 50257, 2048);
  ModelSpec large = small;
  large.hidden = 2048;
  large.ffn_hidden = 8192;
  const PlanConfig c;
  const PlanMemo memo(small);
  CHECK(transformer_layer_plan(small, c).params() == layer_params(1024));
  CHECK(transformer_layer_plan(large, c).params() == layer_params(2048));
  CHECK(transformer_layer_plan(small, c).params() == layer_params(1024));  // remembered
  ModelSpec copy = small;  // the same content, another object: built afresh, after a change too
  copy.hidden = 512;
  copy.ffn_hidden = 2048;
  CHECK(transformer_layer_plan(copy, c).params() == layer_params(512));
}

TEST_CASE("a remembered schedule is the one built afresh") {
  ParallelConfig pc;
  for (PipelineSchedule s : {PipelineSchedule::simple, PipelineSchedule::interleaved, PipelineSchedule::zb_h1,
                             PipelineSchedule::zbv, PipelineSchedule::dualpipev})
    for (int p : {2, 4})
      for (int m : {8, 12}) {
        pc.pipeline = s;
        pc.pipeline_parallel_degree = p;
        pc.microbatches = m;
        pc.virtual_stages = v_shaped(s) ? 2 : 1;
        for (int round = 0; round < 2; ++round)
          for (int stage = 0; stage < p; ++stage) {
            const std::vector<ScheduleStep> built = schedule_steps(pc, stage);
            const std::vector<ScheduleStep>& kept = remembered_schedule_steps(pc, stage);
            REQUIRE(kept.size() == built.size());
            for (std::size_t i = 0; i < built.size(); ++i) {
              INFO("schedule " << static_cast<int>(s) << " p " << p << " m " << m << " stage " << stage << " step " << i);
              CHECK(kept[i].forward == built[i].forward);
              CHECK(kept[i].weight == built[i].weight);
              CHECK(kept[i].microbatch == built[i].microbatch);
              CHECK(kept[i].chunk == built[i].chunk);
            }
          }
      }
}
