// The LM head on the first pipeline stage (parallel.lm_head_stage: first): loading and
// checks, memory, the schedule (the head as one more stage), the estimator and the
// programs (who sends what to whom, where the head steps sit, what each stage computes).
//
// Hand numbers for GPT-2 small (b 1, t 1): gpt2_small_hand.hpp.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "gpt2_small_hand.hpp"
#include "job_fixtures.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/schedule.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using namespace partune::testing::gpt2_small;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {


// GPT-2 small (12 layers) on one p4d node, tp 1, b 1: dp = 8 / pp.
Job head_job(int pp, int micro, LmHeadStage where, std::vector<int> stage_layers = {}) {
  Job j = p4d_job("gpt2-small", 1, 8 / pp * micro);
  j.parallel.pipeline_parallel_degree = pp;
  j.parallel.microbatches = micro;
  j.parallel.lm_head_stage = where;
  j.parallel.stage_layers = std::move(stage_layers);
  return j;
}

std::string yaml(const std::string& parallel_extra, const std::string& model = "gpt2-small") {
  return "model: " + model + "\n"
         "cluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
         "training: {global_batch: 16, precision: fp16}\n"
         "parallel:\n"
         "  microbatches: 4\n" +
         parallel_extra;
}

std::string error_key(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return partune::testing::scenario_error_key(text, "head.yaml", overrides);
}

int index_of(const RankProgram& prog, OpKind kind, int mb, int chunk) {
  for (int i = 0; i < static_cast<int>(prog.ops.size()); ++i) {
    const Instruction& in = prog.ops[i];
    if (in.kind == kind && in.microbatch == mb && in.chunk == chunk) return i;
  }
  return -1;
}

}  // namespace

TEST_CASE("lm_head_stage loads and is checked", "[lm_head][scenario]") {
  CHECK(parse_job(yaml("  pipeline_parallel_degree: 2\n"), "head.yaml").parallel.lm_head_stage == LmHeadStage::last);
  const Job first = parse_job(yaml("  pipeline_parallel_degree: 2\n  lm_head_stage: first\n"), "head.yaml");
  CHECK(first.parallel.lm_head_stage == LmHeadStage::first);
  CHECK(first.lm_head_stage() == 0);
  CHECK(parse_job(yaml("  pipeline_parallel_degree: 4\n"), "head.yaml", {"lm_head_stage=first"}).lm_head_on_first_stage());
  CHECK(std::string(to_string(LmHeadStage::first)) == "first");
  // Only with a pipeline, one chunk per rank, and a head that shares the embedding.
  CHECK(error_key(yaml("  lm_head_stage: first\n"), {"global_batch=32"}) == "parallel.lm_head_stage");  // pp 1
  CHECK(error_key(yaml("  pipeline_parallel_degree: 2\n  virtual_stages: 2\n  lm_head_stage: first\n")) ==
        "parallel.lm_head_stage");
  CHECK(error_key(yaml("  pipeline_parallel_degree: 2\n  lm_head_stage: first\n",
                       "{base: gpt2-small, tied_embeddings: false}")) == "parallel.lm_head_stage");
  CHECK(error_key(yaml("  pipeline_parallel_degree: 2\n  lm_head_stage: middle\n")) == "parallel.lm_head_stage");
}

TEST_CASE("head on stage 0: stage 0 holds the logits and the only copy of the tied weight", "[lm_head][memory]") {
  for (const PipelineSchedule sched : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
    Job j = head_job(2, 4, LmHeadStage::first);
    j.parallel.pipeline = sched;
    require_valid(j);
    INFO(to_string(sched));
    const MemoryBreakdown s0 = stage_memory(j, 0), s1 = stage_memory(j, 1);
    // One micro-batch's logits: the head's forward and backward run back to back.
    CHECK(s0.logits == Approx(kLogits).epsilon(1e-12));
    CHECK(s1.logits == 0);
    CHECK(stage_parameter_count(j, 0) == Approx(6 * kLayerParams + kEmbeddingParams + kHeadParams).epsilon(1e-12));
    CHECK(stage_parameter_count(j, 1) == Approx(6 * kLayerParams).epsilon(1e-12));  // no copy
    CHECK(s1.parameters == Approx(2 * 6 * kLayerParams).epsilon(1e-12));
    // The head on the last stage, for comparison: logits there, plus the embedding copy.
    j.parallel.lm_head_stage = LmHeadStage::last;
    CHECK(stage_memory(j, 0).logits == 0);
    CHECK(stage_memory(j, 1).logits == Approx(kLogits * (sched == PipelineSchedule::gpipe ? 4 : 1)).epsilon(1e-12));
    CHECK(stage_parameter_count(j, 1) == Approx(6 * kLayerParams + kHeadParams + kTiedCopy).epsilon(1e-12));
  }
}

TEST_CASE("head on stage 0: 1F1B treats the head as one more stage", "[lm_head][schedule]") {
  // Warm-up min(p - s, active - 1): one more forward on every stage, so p - s + 1
  // micro-batches in flight; the memory model agrees with the schedule.
  for (int p : {2, 4}) {
    for (int active : {0, 2, 100}) {
      ParallelConfig pc;
      pc.pipeline_parallel_degree = p;
      pc.microbatches = 8;
      pc.active_microbatches = active;
      pc.lm_head_stage = LmHeadStage::first;
      for (int s = 0; s < p; ++s) {
        INFO("p " << p << " active " << active << " stage " << s);
        CHECK(schedule_steps(pc, s) == schedule_1f1b(p + 1, 8, s, active > 0 ? active : p + 2));
        const double expected = active == 2 ? 2 : p - s + 1;
        CHECK(peak_in_flight(schedule_steps(pc, s), 1) == expected);
        CHECK(in_flight_microbatches(pc, s) == Approx(expected).epsilon(1e-12));
      }
    }
  }
  Job j = head_job(4, 8, LmHeadStage::first);
  REQUIRE(j.microbatch_size() == 1);
  // Stage 0 keeps p + 1 = 5 micro-batches of its 3 layers, the last stage 2.
  CHECK(stage_memory(j, 0).activations == Approx(5 * 3 * 89653248.0).epsilon(1e-12));
  CHECK(stage_memory(j, 3).activations == Approx(2 * 3 * 89653248.0).epsilon(1e-12));
}

TEST_CASE("head on stage 0: the estimator moves the head's slot and adds two hops per micro-batch",
          "[lm_head][estimator]") {
  // pp 2, tp 1, [4, 8]: slot_0 = 4 (F + B) + embedding + head, slot_1 = 8 (F + B).
  Job first = head_job(2, 4, LmHeadStage::first, {4, 8});
  Job last = head_job(2, 4, LmHeadStage::last, {4, 8});
  require_valid(first);
  require_valid(last);
  const GpuProfile& gpu = first.cluster.instance.gpu;
  const LayerTime lt = layer_time(gpu, first.model, Precision::fp16, 1, 1, false);
  const HeadTime ht = head_time(gpu, first.model, Precision::fp16, 1, 1);
  const double F = lt.forward(), B = lt.backward();
  const double emb = ht.embedding_fwd + ht.embedding_bwd, head = ht.logits_fwd + ht.logits_bwd;
  const double slot0 = 4 * (F + B) + emb + head, slot1 = 8 * (F + B);
  const Estimate ef = estimate(first), el = estimate(last);
  CHECK(ef.breakdown.compute == Approx(4 * std::max(slot0, slot1)).epsilon(1e-12));
  CHECK(ef.breakdown.pipeline_bubble == Approx(std::min(slot0, slot1)).epsilon(1e-12));
  // The same split with the head on the last stage: slot_0 = 4 (F + B) + emb, slot_1 = 8 (F + B) + head.
  CHECK(el.breakdown.compute == Approx(4 * (8 * (F + B) + head)).epsilon(1e-12));
  CHECK(el.breakdown.pipeline_bubble == Approx(4 * (F + B) + emb).epsilon(1e-12));
  // Pipeline transfers: 2 (m + p - 1) hops per pass, plus 2 m for the head's round trips.
  CHECK(ef.breakdown.pipeline_p2p / el.breakdown.pipeline_p2p == Approx((2.0 * (4 + 1) + 2 * 4) / (2.0 * (4 + 1))));
  CHECK(el.breakdown.pipeline_p2p > 0);
}

TEST_CASE("head on stage 0: the last stage sends its output to stage 0 and gets the gradient back",
          "[lm_head][program]") {
  for (const Granularity gran : {Granularity::chunk, Granularity::layer}) {
    for (const PipelineSchedule sched : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
      for (int pp : {2, 4}) {
        Job j = head_job(pp, 8, LmHeadStage::first);
        j.parallel.pipeline = sched;
        if (sched == PipelineSchedule::gpipe) j.parallel.active_microbatches = 3;  // windows of 3
        require_valid(j);
        INFO("pp " << pp << " " << to_string(sched) << (gran == Granularity::layer ? " layer" : " chunk"));
        const GpuProfile& gpu = j.cluster.instance.gpu;
        const double b = j.microbatch_size();
        const LayerTime lt = layer_time(gpu, j.model, Precision::fp16, b, 1, false);
        const HeadTime ht = head_time(gpu, j.model, Precision::fp16, b, 1);
        const int L = 12 / pp, M = 8, head_chunk = 1;
        const Placement place(j.parallel.placement_strategy, j.data_parallel_degree(), pp, 1);
        // Pairing per (from, to, kind, head hop or not), in program order.
        using Key = std::tuple<int, int, bool, bool>;
        std::map<Key, std::vector<int>> sent, received;
        for (const RankProgram& prog : build_programs(j, {gran})) {
          const int st = prog.coords.pipeline;
          INFO("rank " << prog.rank << " stage " << st);
          double fwd = 0, bwd = 0;
          int head_fwd = 0, head_bwd = 0;
          for (const Instruction& in : prog.ops) {
            const bool hop = in.chunk == head_chunk;
            switch (in.kind) {
              case OpKind::send_activation: sent[{prog.rank, in.peer, true, hop}].push_back(in.microbatch); break;
              case OpKind::send_gradient: sent[{prog.rank, in.peer, false, hop}].push_back(in.microbatch); break;
              case OpKind::recv_activation: received[{in.peer, prog.rank, true, hop}].push_back(in.microbatch); break;
              case OpKind::recv_gradient: received[{in.peer, prog.rank, false, hop}].push_back(in.microbatch); break;
              case OpKind::forward:
                fwd += in.seconds;
                if (in.layers == 0) {
                  ++head_fwd;
                  CHECK(in.chunk == head_chunk);
                  CHECK(in.layer == -1);
                  CHECK(in.seconds == ht.logits_fwd);
                }
                break;
              case OpKind::backward:
                bwd += in.seconds;
                if (in.layers == 0) {
                  ++head_bwd;
                  CHECK(in.seconds == ht.logits_bwd);
                }
                break;
              default: break;
            }
            if (hop && (in.kind == OpKind::send_activation || in.kind == OpKind::recv_activation ||
                        in.kind == OpKind::send_gradient || in.kind == OpKind::recv_gradient)) {
              // The head's hop joins the last stage and stage 0 of the same replica.
              const RankCoords peer = place.coords(in.peer);
              CHECK(peer.data == prog.coords.data);
              CHECK((st == 0 ? peer.pipeline == pp - 1 : st == pp - 1 && peer.pipeline == 0));
            }
          }
          // Stage 0 computes the embedding and the head; the last stage its layers only.
          const double head_f = st == 0 ? ht.embedding_fwd + ht.logits_fwd : 0.0;
          const double head_b = st == 0 ? ht.embedding_bwd + ht.logits_bwd : 0.0;
          CHECK(fwd == Approx(M * (L * lt.forward() + head_f)).epsilon(1e-12));
          CHECK(bwd == Approx(M * (L * lt.backward() + head_b)).epsilon(1e-12));
          CHECK(head_fwd == (st == 0 ? M : 0));
          CHECK(head_bwd == (st == 0 ? M : 0));
        }
        CHECK(sent == received);
        // The head's hop: the last stage sends M activations to stage 0, stage 0 M gradients back.
        const int last_rank = place.rank({0, pp - 1, 0});
        std::vector<int> all(M);
        for (int k = 0; k < M; ++k) all[k] = k;
        CHECK(sent[Key{last_rank, 0, true, true}] == all);
        CHECK(sent[Key{0, last_rank, false, true}] == all);
        // and nothing else crosses from the last stage to stage 0 or back.
        CHECK(sent.count(Key{last_rank, 0, true, false}) == 0);
        CHECK(sent.count(Key{0, last_rank, false, false}) == 0);
      }
    }
  }
}

TEST_CASE("head on stage 0: each head step sits between its forward and its backward", "[lm_head][program]") {
  for (const PipelineSchedule sched : {PipelineSchedule::one_f_one_b, PipelineSchedule::gpipe}) {
    for (int pp : {2, 3, 4}) {
      for (int active : {0, 1}) {
        Job j = head_job(pp, 6, LmHeadStage::first);
        j.model.layers = 12;
        j.cluster.nodes = pp == 3 ? 3 : 1;
        j.training.global_batch = j.world_size() / pp * 6;
        j.parallel.pipeline = sched;
        j.parallel.active_microbatches = active;
        require_valid(j);
        INFO(to_string(sched) << " pp " << pp << " active " << active);
        const RankProgram prog = build_program(j, 0);
        REQUIRE(prog.coords.pipeline == 0);
        for (int k = 0; k < 6; ++k) {
          INFO("micro-batch " << k);
          const int f = index_of(prog, OpKind::forward, k, 0), b = index_of(prog, OpKind::backward, k, 0);
          const int r = index_of(prog, OpKind::recv_activation, k, 1);
          const int hf = index_of(prog, OpKind::forward, k, 1), hb = index_of(prog, OpKind::backward, k, 1);
          const int s = index_of(prog, OpKind::send_gradient, k, 1);
          REQUIRE(f >= 0);
          REQUIRE(r >= 0);
          CHECK(f < r);
          CHECK(r + 1 == hf);  // recv, head forward, head backward, send
          CHECK(hf + 1 == hb);
          // (a wait for the previous head gradient's send may sit in between: sends of a
          // kind go one at a time)
          CHECK((hb + 1 == s || (hb + 2 == s && prog.ops[hb + 1].kind == OpKind::wait)));
          CHECK(prog.ops[s].async);
          CHECK(s < b);
          if (k > 0) CHECK(index_of(prog, OpKind::recv_activation, k - 1, 1) < r);  // in order
        }
      }
    }
  }
}

TEST_CASE("head on stage 0: gradient buckets and sharded gathers carry the tied weight once", "[lm_head][program]") {
  const Job j = head_job(2, 4, LmHeadStage::first);
  require_valid(j);
  for (const RankProgram& prog : build_programs(j)) {
    double bucket_bytes = 0, layer0 = 0;
    for (const Instruction& in : prog.ops)
      if (in.group == CommGroup::data && in.kind == OpKind::all_reduce) {
        bucket_bytes += in.bytes;
        if (in.layer == 0) layer0 = in.bytes;
      }
    const int st = prog.coords.pipeline;
    INFO("rank " << prog.rank);
    const double params = 6 * kLayerParams + (st == 0 ? kEmbeddingParams + kHeadParams : 0.0);
    CHECK(bucket_bytes == Approx(2 * params).epsilon(1e-12));
    if (st == 0) CHECK(layer0 == Approx(2 * (kLayerParams + kEmbeddingParams + kHeadParams)).epsilon(1e-12));
  }
  // Sharded: stage 0 gathers the tied weight (embedding + final norm) for every head step.
  Job sharded = head_job(2, 4, LmHeadStage::first);
  sharded.parallel.sharded_data_parallel_degree = 2;
  require_valid(sharded);
  const RankProgram p0 = build_program(sharded, 0);
  int head_gathers = 0;
  for (const Instruction& in : p0.ops)
    if (in.kind == OpKind::all_gather && in.chunk == 1) {
      ++head_gathers;
      CHECK(in.group == CommGroup::sharded);
      CHECK(in.bytes == Approx(2 * (kEmbeddingParams + kHeadParams)).epsilon(1e-12));
    }
  CHECK(head_gathers == 4);
}
