// A job's costs (job_costs.hpp), built once and read by the estimator, the memory verdict
// and every rank's program builder, and a model's costs (plan_costs.hpp), which a search's
// points share: sharing them changes no figure. Each point's estimate through one shared
// ModelCosts, in any order of configurations and twice over, is the estimate of the job
// alone; the step's FLOPs are Megatron's closed forms; a stage's cost is the same whichever
// order the stages are asked in; every rank's program from one JobCosts is the program
// built alone; and a model's costs serve only their own model.
#include <catch2/catch.hpp>

#include <stdexcept>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/job_costs.hpp"
#include "partune/costmodel/plan_costs.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/program_text.hpp"

using namespace partune;

namespace {

struct Knobs {
  int tp, pp, microbatches;
  bool sp, flash;
  PipelineSchedule schedule;
  Checkpointing ckpt;
};

// GPT-3 175B on 64 p4d: configurations that share some plans and differ in others
// (tensor degree, micro-batch size, sequence parallelism, FlashAttention, checkpointing).
std::vector<Knobs> configurations() {
  std::vector<Knobs> out;
  for (int tp : {4, 8})
    for (int pp : {8, 16})
      for (int m : {16, 32})
        for (bool sp : {false, true})
          for (PipelineSchedule s : {PipelineSchedule::one_f_one_b, PipelineSchedule::zb_h1, PipelineSchedule::zbv})
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

void check_same(const Estimate& a, const Estimate& b) {
  CHECK(a.step_time == b.step_time);
  CHECK(a.model_flops == b.model_flops);
  CHECK(a.hardware_flops == b.hardware_flops);
  CHECK(a.breakdown.compute == b.breakdown.compute);
  CHECK(a.breakdown.tensor_parallel_comm == b.breakdown.tensor_parallel_comm);
  CHECK(a.breakdown.pipeline_bubble == b.breakdown.pipeline_bubble);
  CHECK(a.breakdown.data_parallel_exposed == b.breakdown.data_parallel_exposed);
  CHECK(a.breakdown.optimizer == b.breakdown.optimizer);
  CHECK(a.memory.total() == b.memory.total());
  CHECK(a.memory.stage == b.memory.stage);
  CHECK(a.fits == b.fits);
  CHECK(a.not_fit_reason == b.not_fit_reason);
}

}  // namespace

TEST_CASE("a search's shared model costs give each point the estimate of the job alone, in any order",
          "[job_costs]") {
  Job job = testing::p4d_job("gpt3-175b", 64, 512);
  const std::vector<Knobs> all = configurations();
  std::vector<Estimate> alone;
  for (const Knobs& k : all) {
    apply(k, job);
    REQUIRE_FALSE(check_job(job));
    alone.push_back(estimate(job));
  }
  const ModelSpec& m = job.model;
  const double B = job.training.global_batch;
  ModelCosts model(job.model, job.cluster.instance.gpu);
  for (int round = 0; round < 2; ++round)  // the second round finds every configuration's plans built
    for (std::size_t i = all.size(); i-- > 0;) {
      apply(all[i], job);
      const JobCosts costs(job, model);
      const MemoryFit memory = estimate_memory(costs);
      const Estimate e = estimate(costs, memory);
      INFO("configuration " << i << ", round " << round);
      check_same(e, alone[i]);
      check_same(estimate(costs), alone[i]);
      CHECK(memory.memory.total() == alone[i].memory.total());
      CHECK(memory.fits == alone[i].fits);
      // The step's FLOPs from the model's table are Megatron's closed forms (GPT-3: whole
      // MHA, 4h FFN); full checkpointing recomputes every layer's forward.
      CHECK(e.model_flops == Approx(megatron_model_flops(B, m.seq_len, m.layers, m.hidden, m.vocab)).epsilon(1e-12));
      if (all[i].ckpt == Checkpointing::full)
        CHECK(e.hardware_flops ==
              Approx(megatron_hardware_flops(B, m.seq_len, m.layers, m.hidden, m.vocab)).epsilon(1e-12));
    }
}

TEST_CASE("a model's costs build a configuration's plans once and serve only their own model", "[job_costs]") {
  // A GPT layer at tensor degree 1 holds 12 h^2 + 13 h parameters (QKV 3h^2 + 3h, the
  // projection h^2 + h, fc1 4h^2 + 4h, fc2 4h^2 + h, two LayerNorms 4h); at tensor degree
  // t the column- and row-parallel weights split: 12 h^2 / t + 7 h / t + 6 h.
  Job job = testing::p4d_job("gpt2-small", 1, 8);
  const double h = job.model.hidden;
  ModelCosts model(job.model, job.cluster.instance.gpu);
  PlanConfig whole, split;
  split.tensor_degree = 4;
  const auto a = model.plans(whole), b = model.plans(split), again = model.plans(whole);
  CHECK(a == again);  // the same object: built once
  CHECK(a != b);
  CHECK(a->dense.params() == Approx(12 * h * h + 13 * h).epsilon(1e-12));
  CHECK(b->dense.params() == Approx(12 * h * h / 4 + 7 * h / 4 + 6 * h).epsilon(1e-12));
  CHECK(a->moe.params() == a->dense.params());  // a dense model: its one kind of layer
  CHECK(a->rank.dense_layer == a->dense.params());

  const Job copy = job;  // the same content, another model object
  CHECK_THROWS_AS(JobCosts(copy, model), std::logic_error);
  CHECK_NOTHROW(JobCosts(job, model));
}

TEST_CASE("a job's stage costs are the same whichever order the stages are asked in", "[job_costs]") {
  Job job = testing::p4d_job("gpt3-175b", 64, 512);
  apply({8, 16, 32, true, true, PipelineSchedule::one_f_one_b, Checkpointing::selective}, job);
  job.parallel.stage_layers.clear();
  REQUIRE_FALSE(check_job(job));
  const JobCosts forward(job), backward(job);
  const int p = job.parallel.pipeline_parallel_degree;
  for (int s = p; s-- > 0;) backward.cost(s);
  for (int s = 0; s < p; ++s) {
    INFO("stage " << s);
    const StageCost &x = forward.cost(s), &y = backward.cost(s);
    CHECK(x.forward == y.forward);
    CHECK(x.backward == y.backward);
    CHECK(x.recompute == y.recompute);
    CHECK(x.tensor_forward == y.tensor_forward);
    CHECK(x.tensor_backward == y.tensor_backward);
    CHECK(forward.collectives(s).count() == backward.collectives(s).count());
    // Megatron's rule: 2 all-reduces (or with sequence parallelism 2 all-gathers and 2
    // reduce-scatters) per layer in each pass.
    CHECK(forward.collectives(s).count(CollectiveKind::all_gather) >= 2 * job.layers_on_stage(s));
  }
}

TEST_CASE("every rank's program from one job's costs is the program built alone", "[job_costs]") {
  Job job = testing::p4d_job("gpt2-small", 1, 16);
  job.parallel.tensor_parallel_degree = 2;
  job.parallel.pipeline_parallel_degree = 2;
  job.parallel.microbatches = 4;
  job.parallel.sequence_parallel = true;
  job.parallel.activation_checkpointing = Checkpointing::full;
  REQUIRE_FALSE(check_job(job));
  const JobCosts costs(job);
  const std::vector<RankProgram> shared = build_programs(costs);
  REQUIRE(static_cast<int>(shared.size()) == job.world_size());
  for (int r = 0; r < job.world_size(); ++r) {
    INFO("rank " << r);
    CHECK(programs_text({shared[r]}) == programs_text({build_program(job, r)}));
  }
}
