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
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/schedule.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;
using partune::testing::scenario_error_key;

namespace {

enum Phase { F, B, W };
Phase phase(const ScheduleStep& s) { return s.forward ? F : s.weight ? W : B; }

// Runs every stage's steps in order: F waits for the previous stage's F of its
// micro-batch, B for the next stage's B (and its own F), W for its own B. Returns the
// makespan, or -1 on deadlock. `split` false: a backward step is B and W at once.
double execute(const std::vector<std::vector<ScheduleStep>>& per_stage, double f, double b, double w) {
  const int p = static_cast<int>(per_stage.size());
  std::map<std::tuple<int, int, int>, double> done;  // (phase, stage, micro-batch) -> end
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  double makespan = 0;
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < p; ++s)
      while (next[s] < per_stage[s].size()) {
        const ScheduleStep& st = per_stage[s][next[s]];
        const Phase ph = phase(st);
        double ready = free_at[s];
        auto after = [&](Phase q, int stage) {
          auto it = done.find({q, stage, st.microbatch});
          if (it == done.end()) return false;
          ready = std::max(ready, it->second);
          return true;
        };
        if (ph == F && s > 0 && !after(F, s - 1)) break;
        if (ph == B && (!after(F, s) || (s < p - 1 && !after(B, s + 1)))) break;
        if (ph == W && !after(B, s)) break;
        const double end = ready + (ph == F ? f : ph == B ? b : w);
        done[{ph, s, st.microbatch}] = end;
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

TEST_CASE("ZB-H1: every micro-batch's F, B and W once, in order; 1F1B's flight", "[schedule][zb]") {
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

TEST_CASE("zb-h1 is a pipeline schedule by name; what it cannot run is refused", "[schedule][zb]") {
  CHECK(std::string(to_string(PipelineSchedule::zb_h1)) == "zb-h1");
  CHECK(splits_backward(PipelineSchedule::zb_h1));
  CHECK_FALSE(splits_backward(PipelineSchedule::interleaved));
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
        pc.pipeline = PipelineSchedule::interleaved;
        CHECK(schedule_makespan(pc, times) == Approx((m + p - 1) * (t.f + t.b + t.w)));
      }
}
