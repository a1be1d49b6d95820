// The layer plan (layer_plan.hpp) against independent expectations: Korthikanti et al.
// 2022's Table 2 for activation memory, with and without sequence parallelism; Megatron's
// f/g rule, written out by hand, for the tensor-parallel collectives of every pipeline
// stage, as the estimator's stage costs and the per-rank programs count them.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <tuple>

#include "job_fixtures.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/job_costs.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

// GPT-3 175B (s 2048, h 12288, a 96) on 8 nodes, tensor degree t, micro-batch b.
Job gpt3(int t, int b, Checkpointing ckpt, bool sp, bool flash) {
  Job j = p4d_job("gpt3-175b", 8, 64 * b / t);
  j.parallel.tensor_parallel_degree = t;
  j.parallel.pipeline_parallel_degree = 1;
  j.parallel.microbatches = 1;
  j.parallel.activation_checkpointing = ckpt;
  j.parallel.sequence_parallel = sp;
  j.parallel.flash_attention = flash;
  return j;
}

}  // namespace

TEST_CASE("activation memory per layer is Korthikanti's Table 2", "[layer_plan][memory]") {
  const double s = 2048, h = 12288, a = 96;
  for (int t : {2, 4, 8}) {
    for (int b : {1, 2}) {
      const double sbh = s * b * h;
      INFO("t " << t << " b " << b);
      // No parallelism of the sequence: sbh(10 + 24/t + 5as/(ht)).
      CHECK(stored_layer_bytes(gpt3(t, b, Checkpointing::none, false, false), b) ==
            Approx(sbh * (10 + 24.0 / t + 5 * a * s / (h * t))).epsilon(1e-12));
      // Sequence parallelism: sbh(34/t + 5as/(ht)); FlashAttention removes the second term.
      CHECK(stored_layer_bytes(gpt3(t, b, Checkpointing::none, true, false), b) ==
            Approx(sbh * (34.0 / t + 5 * a * s / (h * t))).epsilon(1e-12));
      CHECK(stored_layer_bytes(gpt3(t, b, Checkpointing::none, true, true), b) ==
            Approx(sbh * 34.0 / t).epsilon(1e-12));
      // Selective recomputation: 34sbh/t with sequence parallelism, sbh(10 + 24/t) without.
      CHECK(stored_layer_bytes(gpt3(t, b, Checkpointing::selective, true, false), b) ==
            Approx(34.0 * sbh / t).epsilon(1e-12));
      CHECK(stored_layer_bytes(gpt3(t, b, Checkpointing::selective, false, false), b) ==
            Approx(sbh * (10 + 24.0 / t)).epsilon(1e-12));
      // Full recomputation keeps the layer's input: 2sbh, 2sbh/t with sequence parallelism.
      CHECK(stored_layer_bytes(gpt3(t, b, Checkpointing::full, false, false), b) == Approx(2 * sbh).epsilon(1e-12));
      CHECK(stored_layer_bytes(gpt3(t, b, Checkpointing::full, true, false), b) ==
            Approx(2 * sbh / t).epsilon(1e-12));
    }
  }
}

TEST_CASE("sequence parallelism needs a tensor-parallel group", "[layer_plan][job]") {
  Job j = gpt3(1, 1, Checkpointing::none, true, false);
  const JobViolation v = check_job(j);
  CHECK(v.key == "parallel.sequence_parallel");
}

namespace {

// Megatron's rule per micro-batch on `stage`, written out by hand: (forward, backward)
// collectives of each kind. Layers: 2 g forward, 2 f backward (sequence parallelism: 2
// all-gathers + 2 reduce-scatters forward; 2 reduce-scatters + 2 gradient all-gathers +
// 2 input re-gathers backward); full recompute repeats the forward. The embedding's stage:
// its g forward (sequence parallelism: a reduce-scatter forward, an all-gather backward).
// The head's stage: its f backward (sequence parallelism: an all-gather forward, a
// reduce-scatter and a re-gather backward) and the loss's 3 all-reduces forward.
struct Counts {
  int all_reduce = 0, all_gather = 0, reduce_scatter = 0;
  bool operator==(const Counts& o) const {
    return all_reduce == o.all_reduce && all_gather == o.all_gather && reduce_scatter == o.reduce_scatter;
  }
};
std::ostream& operator<<(std::ostream& os, const Counts& c) {
  return os << "{AR " << c.all_reduce << ", AG " << c.all_gather << ", RS " << c.reduce_scatter << "}";
}

Counts megatron_rule(int layers, int recomputed, bool embedding, bool head, bool sp) {
  Counts c;
  if (!sp) {
    c.all_reduce = 4 * layers + 2 * recomputed + (embedding ? 1 : 0) + (head ? 1 + 3 : 0);
    return c;
  }
  c.all_gather = 2 * layers + 4 * layers + 2 * recomputed + (embedding ? 1 : 0) + (head ? 1 + 1 : 0);
  c.reduce_scatter = 2 * layers + 2 * layers + 2 * recomputed + (embedding ? 1 : 0) + (head ? 1 : 0);
  c.all_reduce = head ? 3 : 0;
  return c;
}

Counts count(const StageCollectives& sc) {
  return {sc.count(CollectiveKind::all_reduce), sc.count(CollectiveKind::all_gather),
          sc.count(CollectiveKind::reduce_scatter)};
}

// The tensor collectives one rank's program runs, per micro-batch.
Counts count(const RankProgram& prog, int microbatches) {
  Counts c;
  for (const Instruction& in : prog.ops) {
    // (Without a micro-batch: the sequence-parallel gradient sum, once a step; test_program.cpp.)
    if (in.group != CommGroup::tensor || in.microbatch < 0) continue;
    if (in.kind == OpKind::all_reduce) c.all_reduce += in.count;
    if (in.kind == OpKind::all_gather) c.all_gather += in.count;
    if (in.kind == OpKind::reduce_scatter) c.reduce_scatter += in.count;
  }
  REQUIRE(c.all_reduce % microbatches == 0);
  return {c.all_reduce / microbatches, c.all_gather / microbatches, c.reduce_scatter / microbatches};
}

struct Variant {
  const char* name;
  bool tied;
  LmHeadStage head;
};

}  // namespace

TEST_CASE("tensor collectives per stage follow Megatron's rule in the estimator and the programs",
          "[layer_plan][program]") {
  const Variant variants[] = {{"tied, head on the last stage", true, LmHeadStage::last},
                              {"tied, head on the first stage", true, LmHeadStage::first},
                              {"untied head", false, LmHeadStage::last}};
  for (const Variant& v : variants)
    for (bool sp : {false, true})
      for (Checkpointing ckpt : {Checkpointing::none, Checkpointing::full})
        for (Granularity gran : {Granularity::chunk, Granularity::layer}) {
          // GPT-2 small on one p4d node: pipeline 4 x tensor 2, 4 micro-batches.
          Job j = p4d_job("gpt2-small", 1, 8);
          j.model.tied_embeddings = v.tied;
          j.parallel.pipeline_parallel_degree = 4;
          j.parallel.tensor_parallel_degree = 2;
          j.parallel.microbatches = 4;
          j.parallel.lm_head_stage = v.head;
          j.parallel.sequence_parallel = sp;
          j.parallel.activation_checkpointing = ckpt;
          require_valid(j);
          INFO(v.name << (sp ? ", sequence parallel" : "") << (ckpt == Checkpointing::full ? ", full ckpt" : "")
                      << (gran == Granularity::layer ? ", layer granularity" : ""));
          const JobCosts stages(j);
          for (const RankProgram& prog : build_programs(j, {gran})) {
            const int s = prog.coords.pipeline, L = 3;
            INFO("stage " << s);
            const bool head = s == (v.head == LmHeadStage::first ? 0 : 3);
            const Counts expected = megatron_rule(L, ckpt == Checkpointing::full ? L : 0, s == 0, head, sp);
            CHECK(count(stages.collectives(s)) == expected);
            CHECK(count(prog, 4) == expected);
          }
        }
}

TEST_CASE("sequence parallelism moves the same tensor bytes as all-reduces", "[layer_plan]") {
  // A ring all-reduce of S moves what an all-gather of S and a reduce-scatter of S move:
  // the plan's collectives keep the bytes, only the kinds change.
  Job j = p4d_job("gpt2-small", 1, 8);
  j.parallel.tensor_parallel_degree = 4;
  const LayerPlan plain = transformer_layer_plan(j.model, plan_config(j));
  j.parallel.sequence_parallel = true;
  const LayerPlan sp = transformer_layer_plan(j.model, plan_config(j));
  const double S = 8.0 / 2 * 1024 * 768 * 2;  // b s h fp16, b = 8 / dp 2
  for (const PlanOp& op : plain.ops)
    if (op.kind == PlanOpKind::tensor_comm) CHECK(op.comm_bytes == Approx(S));
  for (const PlanOp& op : sp.ops)
    if (op.kind == PlanOpKind::tensor_comm) CHECK(op.comm_bytes == Approx(S));
  // The norms and dropouts work on s/t tokens: a quarter of the memory-bound bytes.
  CHECK(sp.op(PlanOpRole::input_norm).forward_work.total_bytes() == Approx(plain.op(PlanOpRole::input_norm).forward_work.total_bytes() / 4));
  CHECK(sp.op(PlanOpRole::mlp_dropout_residual).forward_work.total_bytes() == Approx(plain.op(PlanOpRole::mlp_dropout_residual).forward_work.total_bytes() / 4));
  // The GEMMs do not change.
  CHECK(sp.gemm_flops() == Approx(plain.gemm_flops()));
}
