// The zero-bubble schedule ZB-H1 (schedule.hpp) against its paper's properties, written
// out by hand (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3; DeepSeek's
// DualPipe README states the same bubble as (PP - 1)(F + B - 2W) with B the whole backward):
//   - each micro-batch's forward F, input gradients B and weight gradients W run once, in
//     that order;
//   - stage s holds at most min(p - s, m) micro-batches in flight, as 1F1B;
//   - run together on p stages (free communication, W waiting on nothing but its own B),
//     with m >= p and W < F + B: never deadlocks and finishes in
//       m (F + B + W) + (p - 1)(F + B - W)      (1F1B: m (F + B + W) + (p - 1)(F + B + W));
//   - memory: with a stage's forward keeping A and its W needing w <= A after its B,
//     stage s peaks at (p - s) A + s w.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/schedule.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using partune::testing::scenario_error_key;

namespace {

enum Phase { F, B, W };
Phase phase(const ScheduleStep& s) { return s.forward ? F : s.weight ? W : B; }

// Runs every stage's steps in order: F waits for the previous model chunk's F of its
// micro-batch, B for the next model chunk's B (and its own F), W for its own B; chunk c of
// stage s is model chunk s (one chunk a stage) or, in a V, s for chunk 0 and 2p - 1 - s
// for chunk 1. Returns the makespan, or -1 on deadlock.
double execute(const std::vector<std::vector<ScheduleStep>>& per_stage, double f, double b, double w,
               bool v_shape = false) {
  const int p = static_cast<int>(per_stage.size()), chunks = v_shape ? 2 * p : p;
  std::map<std::tuple<int, int, int>, double> done;  // (phase, model chunk, micro-batch) -> end
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  double makespan = 0;
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < p; ++s)
      while (next[s] < per_stage[s].size()) {
        const ScheduleStep& st = per_stage[s][next[s]];
        const Phase ph = phase(st);
        const int k = st.chunk == 0 ? s : 2 * p - 1 - s;
        double ready = free_at[s];
        auto after = [&](Phase q, int chunk) {
          auto it = done.find({q, chunk, st.microbatch});
          if (it == done.end()) return false;
          ready = std::max(ready, it->second);
          return true;
        };
        if (ph == F && k > 0 && !after(F, k - 1)) break;
        if (ph == B && (!after(F, k) || (k < chunks - 1 && !after(B, k + 1)))) break;
        if (ph == W && !after(B, k)) break;
        const double end = ready + (ph == F ? f : ph == B ? b : w);
        done[{ph, k, st.microbatch}] = end;
        free_at[s] = end;
        makespan = std::max(makespan, end);
        ++next[s];
        progressed = true;
      }
  }
  for (int s = 0; s < p; ++s)
    if (next[s] < per_stage[s].size()) return -1;
  return makespan;
}

std::vector<std::vector<ScheduleStep>> zb_h1(int p, int m) {
  std::vector<std::vector<ScheduleStep>> st;
  for (int s = 0; s < p; ++s) st.push_back(schedule_zb_h1(p, m, s));
  return st;
}

}  // namespace

TEST_CASE("ZB-H1: every micro-batch's F, B and W once, in order, 1F1B's flight", "[schedule][zb]") {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {1, 2, 4, 8, 13})
      for (int s = 0; s < p; ++s) {
        INFO("p " << p << " m " << m << " stage " << s);
        const std::vector<ScheduleStep> steps = schedule_zb_h1(p, m, s);
        REQUIRE(steps.size() == static_cast<std::size_t>(3 * m));
        std::map<int, std::vector<Phase>> seen;
        int forwards_first = 0;
        bool backward_seen = false;
        for (const ScheduleStep& st : steps) {
          CHECK(st.chunk == 0);
          seen[st.microbatch].push_back(phase(st));
          backward_seen = backward_seen || !st.forward;
          if (!backward_seen) ++forwards_first;
        }
        for (int mb = 0; mb < m; ++mb) CHECK(seen[mb] == std::vector<Phase>{F, B, W});
        CHECK(forwards_first == std::min(p - s, m));
        CHECK(peak_in_flight(steps, 1) == std::min(p - s, m));
      }
}

TEST_CASE("ZB-H1 and 1F1B run together: the published bubbles", "[schedule][zb]") {
  struct Times { double f, b, w; };
  for (const Times t : {Times{1, 1, 1}, Times{1, 2, 1}, Times{2, 1, 1}, Times{1, 1, 0.5}, Times{3, 2, 1}})
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {p, p + 1, 2 * p, 3 * p + 1}) {
        INFO("p " << p << " m " << m << " F " << t.f << " B " << t.b << " W " << t.w);
        CHECK(execute(zb_h1(p, m), t.f, t.b, t.w) == Approx(m * (t.f + t.b + t.w) + (p - 1) * (t.f + t.b - t.w)));
        // 1F1B: its backward is B and W at once.
        std::vector<std::vector<ScheduleStep>> one_f_one_b;
        for (int s = 0; s < p; ++s) one_f_one_b.push_back(schedule_1f1b(p, m, s, 0));
        CHECK(execute(one_f_one_b, t.f, t.b + t.w, 0.0) ==
              Approx(m * (t.f + t.b + t.w) + (p - 1) * (t.f + t.b + t.w)));
      }
}

TEST_CASE("ZB-H1 holds (p - s) activations and s W's at its peak", "[schedule][zb]") {
  for (int p : {1, 2, 4, 8})
    for (int m : {p, p + 3, 2 * p})
      for (int s = 0; s < p; ++s) {
        INFO("p " << p << " m " << m << " stage " << s);
        const std::vector<ScheduleStep> steps = schedule_zb_h1(p, m, s);
        CHECK(peak_split_backward_bytes(steps, 1.0, 0.0) == p - s);
        CHECK(peak_split_backward_bytes(steps, 0.0, 1.0) == s + 1);  // right after a B, before its W
        CHECK(peak_split_backward_bytes(steps, 1.0, 0.5) == Approx((p - s) + 0.5 * s));
      }
}

TEST_CASE("zb-h1 is a pipeline schedule by name, what it cannot run is refused", "[schedule][zb]") {
  CHECK(std::string(to_string(PipelineSchedule::zb_h1)) == "zb-h1");
  CHECK(splits_backward(PipelineSchedule::zb_h1));
  CHECK_FALSE(splits_backward(PipelineSchedule::one_f_one_b));
  const std::string job =
      "kind: job\nname: t\nmodel: gpt2-small\ncluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
      "training: {global_batch: 64}\nparallel: {pipeline_parallel_degree: 4, microbatches: 8, pipeline: zb-h1";
  CHECK(parse_job(job + "}\n", "zb.yaml").parallel.pipeline == PipelineSchedule::zb_h1);
  CHECK(scenario_error_key(job + ", virtual_stages: 2}\n", "zb.yaml") == "parallel.virtual_stages");
  CHECK(scenario_error_key(job + ", lm_head_stage: first}\n", "zb.yaml") == "parallel.lm_head_stage");
  CHECK(scenario_error_key(job + ", sharded_data_parallel_degree: 2}\n", "zb.yaml") == "parallel.pipeline");
  CHECK(scenario_error_key(job + ", activation_checkpointing: full, offload_activations: true}\n", "zb.yaml") ==
        "parallel.pipeline");
}

TEST_CASE("a zb-h1 program: each layer's W after its B, buckets after the last W, B + W = 1F1B's backward",
          "[program][zb]") {
  // GPT-2 small on 8 GPUs: pipeline 4, data 2, 8 micro-batches; per layer as the backend runs.
  const std::string text =
      "kind: job\nname: t\nmodel: gpt2-small\ncluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
      "training: {global_batch: 64}\nparallel: {pipeline_parallel_degree: 4, microbatches: 8, pipeline: ";
  const Job zb = parse_job(text + "zb-h1}\n", "zb.yaml"), one = parse_job(text + "interleaved}\n", "1f1b.yaml");
  ProgramOptions layer;
  layer.granularity = Granularity::layer;
  for (int rank : {0, 3}) {  // the first stage and the last
    INFO("rank " << rank);
    const RankProgram p = build_program(zb, rank, layer), q = build_program(one, rank, layer);
    std::map<std::pair<int, int>, int> backward_at;  // (micro-batch, layer) -> index
    int last_weight = -1, first_bucket = -1;
    double b_plus_w = 0, full = 0;
    for (int i = 0; i < static_cast<int>(p.ops.size()); ++i) {
      const Instruction& in = p.ops[i];
      if (in.kind == OpKind::backward) backward_at[{in.microbatch, in.layer}] = i, b_plus_w += in.seconds;
      if (in.kind == OpKind::backward_weight) {
        INFO("W of micro-batch " << in.microbatch << " layer " << in.layer);
        REQUIRE(backward_at.count({in.microbatch, in.layer}) == 1);  // its B ran before it
        last_weight = i;
        b_plus_w += in.seconds;
      }
      if (in.kind == OpKind::all_reduce && in.group == CommGroup::data && first_bucket < 0) first_bucket = i;
    }
    for (const Instruction& in : q.ops)
      if (in.kind == OpKind::backward) full += in.seconds;
    CHECK(b_plus_w == Approx(full).epsilon(1e-12));
    REQUIRE(first_bucket >= 0);
    // The buckets go with the last micro-batch's W's: the first after the W of the
    // chunk's last layer, before the final W's of the layers beneath it.
    CHECK(p.ops[first_bucket - 1].kind == OpKind::backward_weight);
    CHECK(p.ops[first_bucket - 1].microbatch == 7);
    CHECK(first_bucket < last_weight);
  }
}

TEST_CASE("schedule_makespan runs the stages as the harness above does, m < p too", "[schedule][zb]") {
  struct Times { double f, b, w; };
  for (const Times t : {Times{1, 1, 1}, Times{1, 2, 0.5}, Times{3, 2, 1}})
    for (int p : {1, 2, 4, 8})
      for (int m : {1, 2, p, 2 * p + 1}) {
        INFO("p " << p << " m " << m << " F " << t.f << " B " << t.b << " W " << t.w);
        ParallelConfig pc;
        pc.pipeline_parallel_degree = p;
        pc.microbatches = m;
        pc.pipeline = PipelineSchedule::zb_h1;
        const std::vector<ChunkTimes> times(p, ChunkTimes{t.f, t.b, t.w});
        CHECK(schedule_makespan(pc, times) == Approx(execute(zb_h1(p, m), t.f, t.b, t.w)));
        // 1F1B folds W into its backward: the classic (m + p - 1)(F + B + W).
        pc.pipeline = PipelineSchedule::one_f_one_b;
        CHECK(schedule_makespan(pc, times) == Approx((m + p - 1) * (t.f + t.b + t.w)));
      }
}

namespace {

std::vector<std::vector<ScheduleStep>> v_schedule(PipelineSchedule sc, int p, int m) {
  std::vector<std::vector<ScheduleStep>> st;
  for (int s = 0; s < p; ++s) st.push_back(sc == PipelineSchedule::zbv ? schedule_zbv(p, m, s) : schedule_dualpipev(p, m, s));
  return st;
}

}  // namespace

TEST_CASE("ZBV and DualPipeV: each chunk's F, B and W once, in order, no deadlock", "[schedule][zb]") {
  for (PipelineSchedule sc : {PipelineSchedule::zbv, PipelineSchedule::dualpipev})
    for (int p : {2, 3, 4, 8})
      for (int m : {2 * p, 2 * p + 1, 3 * p, 4 * p + 2}) {
        INFO(to_string(sc) << " p " << p << " m " << m);
        const auto st = v_schedule(sc, p, m);
        for (int s = 0; s < p; ++s) {
          INFO("stage " << s);
          REQUIRE(st[s].size() == static_cast<std::size_t>(6 * m));
          std::map<std::pair<int, int>, std::vector<Phase>> seen;
          for (const ScheduleStep& x : st[s]) seen[{x.microbatch, x.chunk}].push_back(phase(x));
          for (int mb = 0; mb < m; ++mb)
            for (int c = 0; c < 2; ++c) CHECK(seen[{mb, c}] == std::vector<Phase>{F, B, W});
        }
        CHECK(execute(st, 1.0, 1.0, 1.0, true) > 0);
        CHECK(execute(st, 3.0, 2.0, 1.0, true) > 0);
      }
}

TEST_CASE("ZBV at F = B = W: the V's ramp alone, (p - 1) chunk forwards", "[schedule][zb]") {
  // A chunk is half a stage: f = b = w = 1 a chunk. The last stage cannot start before the
  // first micro-batch's forward has passed p - 1 chunks, and ZBV loses nothing else: the
  // step is 2 m (f + b + w) + (p - 1) f, a bubble rate of (p - 1) / (6 m) of a stage's 3 m
  // units, where 1F1B's is (p - 1) / m and ZB-H1's (p - 1) / (3 m) (the zero-bubble
  // papers' table, which rounds ZBV's to 0). DualPipeV with its F&B pairs run one after
  // the other does the same here.
  for (PipelineSchedule sc : {PipelineSchedule::zbv, PipelineSchedule::dualpipev})
    for (int p : {2, 3, 4, 8})
      for (int m : {2 * p, 3 * p, 4 * p + 2}) {
        INFO(to_string(sc) << " p " << p << " m " << m);
        CHECK(execute(v_schedule(sc, p, m), 1.0, 1.0, 1.0, true) == Approx(6.0 * m + (p - 1)));
        ParallelConfig pc;
        pc.pipeline_parallel_degree = p;
        pc.microbatches = m;
        pc.virtual_stages = 2;
        pc.pipeline = sc;
        for (const ChunkTimes t : {ChunkTimes{1, 1, 1}, ChunkTimes{2, 1.5, 0.5}})
          CHECK(schedule_makespan(pc, std::vector<ChunkTimes>(p, t)) ==
                Approx(execute(v_schedule(sc, p, m), t.forward, t.input, t.weight, true)));
      }
}

TEST_CASE("ZBV holds 1F1B's activations on every stage", "[schedule][zb][memory]") {
  // 1F1B's first stage holds p micro-batches; ZBV holds as much (2p chunks of half a
  // stage) on every stage (Qi et al. 2024: "the same activation memory as 1F1B").
  for (int p : {2, 4, 8})
    for (int m : {2 * p, 4 * p}) {
      const auto st = v_schedule(PipelineSchedule::zbv, p, m);
      for (int s = 0; s < p; ++s) {
        INFO("p " << p << " m " << m << " stage " << s);
        CHECK(peak_in_flight(st[s], 2) <= p);
      }
      CHECK(peak_in_flight(st[0], 2) == p);
    }
}

TEST_CASE("a V places the model's two ends on stage 0 and turns on the last stage", "[schedule][zb]") {
  ParallelConfig pc;
  pc.pipeline_parallel_degree = 4;
  pc.virtual_stages = 2;
  pc.pipeline = PipelineSchedule::zbv;
  // chunk 0 of stages 0..3 runs model chunks 0..3, chunk 1 runs 7..4.
  const int expected[4][2] = {{0, 7}, {1, 6}, {2, 5}, {3, 4}};
  for (int s = 0; s < 4; ++s)
    for (int c = 0; c < 2; ++c) {
      CHECK(model_chunk(pc, s, c) == expected[s][c]);
      const ChunkPosition at = chunk_position(pc, expected[s][c]);
      CHECK(at.stage == s);
      CHECK(at.chunk == c);
    }
  // gpt2-small (12 layers, tied embeddings) over 2 stages in a V: 4 chunks of 3 layers.
  const std::string text =
      "kind: job\nname: t\nmodel: gpt2-small\ncluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
      "training: {global_batch: 64}\nparallel: {pipeline_parallel_degree: 2, microbatches: 8, pipeline: zbv}\n";
  const Job job = parse_job(text, "zbv.yaml");
  CHECK(job.parallel.virtual_stages == 2);  // a V's default
  CHECK(job.lm_head_stage() == 0);
  CHECK_FALSE(job.tied_embedding_copies());  // tied: both ends on stage 0, one copy
  CHECK(job.global_layer(0, 1, 0) == 9);     // stage 0's chunk 1: the last model chunk
  CHECK(job.global_layer(1, 1, 0) == 6);
  // The turn: stage 1's chunk 0 hands its output to its own chunk 1 (and the gradient
  // back), so its every transfer goes to stage 0; no embedding-group sum.
  const Placement placement(job.parallel.placement_strategy, job.data_context_degree(), 2, 1);
  for (int rank = 0; rank < job.world_size(); ++rank) {
    const RankProgram program = build_program(job, rank);
    const int stage = program.coords.pipeline;
    for (const Instruction& in : program.ops) {
      CHECK(in.group != CommGroup::embedding);
      if (in.peer >= 0) CHECK(placement.coords(in.peer).pipeline == 1 - stage);
    }
  }
  CHECK(scenario_error_key(text, "zbv.yaml", {"parallel.microbatches=2"}) == "parallel.microbatches");
  CHECK(scenario_error_key(text, "zbv.yaml", {"parallel.virtual_stages=4"}) == "parallel.virtual_stages");
}
