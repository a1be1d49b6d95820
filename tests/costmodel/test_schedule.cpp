// Pipeline schedules (program.hpp: schedule_gpipe, schedule_1f1b, schedule_interleaved,
// schedule_steps, peak_in_flight). Expectations are the published properties of each
// schedule, written as closed forms:
//   - every (micro-batch, chunk) runs forward once and backward once, forward first;
//   - GPipe holds m micro-batches (or windows of `active`), 1F1B holds min(p - s, m) on
//     stage s, Megatron's interleaved 1F1B holds p + (p - 1) / v on stage 0;
//   - executed together on p stages with uniform per-chunk times f and b and free
//     communication, the schedules never deadlock and finish in
//       GPipe, 1F1B:  (m + p - 1)(f + b)            interleaved: (m + (p - 1) / v)(f + b)
//     (the classic bubble formulas, Huang et al. 2019, Narayanan et al. 2021).
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/schedule.hpp"

using namespace partune;

namespace {

using Item = std::pair<int, int>;  // (micro-batch, chunk)

// Checks the "each item once forward, once backward, forward first" contract and returns
// the largest number of items whose forward ran and backward did not (counted with an
// explicit set of live items, not a running sum).
int check_complete_and_peak(const std::vector<ScheduleStep>& steps, int m, int v) {
  std::map<Item, int> forwards, backwards;
  std::set<Item> live;
  std::size_t peak = 0;
  for (const ScheduleStep& s : steps) {
    REQUIRE(s.microbatch >= 0);
    REQUIRE(s.microbatch < m);
    REQUIRE(s.chunk >= 0);
    REQUIRE(s.chunk < v);
    const Item it{s.microbatch, s.chunk};
    if (s.forward) {
      ++forwards[it];
      live.insert(it);
    } else {
      ++backwards[it];
      INFO("backward of micro-batch " << s.microbatch << " chunk " << s.chunk << " before its forward");
      REQUIRE(live.count(it) == 1);  // its forward ran already, and its backward did not
      live.erase(it);
    }
    peak = std::max(peak, live.size());
  }
  CHECK(steps.size() == static_cast<std::size_t>(2 * m * v));
  CHECK(live.empty());
  for (int mb = 0; mb < m; ++mb)
    for (int c = 0; c < v; ++c) {
      INFO("micro-batch " << mb << " chunk " << c);
      CHECK(forwards[{mb, c}] == 1);
      CHECK(backwards[{mb, c}] == 1);
    }
  return static_cast<int>(peak);
}

int forwards_before_first_backward(const std::vector<ScheduleStep>& steps) {
  int n = 0;
  for (const ScheduleStep& s : steps) {
    if (!s.forward) break;
    ++n;
  }
  return n;
}

// Runs every stage's schedule together: stage s executes its steps in order; chunk c of
// stage s is model stage c * p + s (Megatron's interleaving). A forward waits for the
// previous model stage's forward of the same micro-batch, a backward for the next model
// stage's backward. Each chunk forward takes f, each chunk backward b; communication is
// free. Returns the makespan, or -1 on deadlock.
double execute_pipeline(const std::vector<std::vector<ScheduleStep>>& per_stage, int p, int v, double f,
                        double b) {
  const int P = p * v;
  std::map<std::pair<int, int>, double> fwd_done, bwd_done;  // (model stage, mb) -> finish
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  std::size_t remaining = 0;
  for (const auto& s : per_stage) remaining += s.size();
  double makespan = 0;
  while (remaining > 0) {
    bool progressed = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < per_stage[s].size()) {
        const ScheduleStep& st = per_stage[s][next[s]];
        const int ms = st.chunk * p + s;
        double ready = free_at[s];
        if (st.forward) {
          if (ms > 0) {
            auto it = fwd_done.find({ms - 1, st.microbatch});
            if (it == fwd_done.end()) break;
            ready = std::max(ready, it->second);
          }
        } else {
          auto own = fwd_done.find({ms, st.microbatch});
          if (own == fwd_done.end()) break;
          ready = std::max(ready, own->second);
          if (ms < P - 1) {
            auto it = bwd_done.find({ms + 1, st.microbatch});
            if (it == bwd_done.end()) break;
            ready = std::max(ready, it->second);
          }
        }
        const double end = ready + (st.forward ? f : b);
        (st.forward ? fwd_done : bwd_done)[{ms, st.microbatch}] = end;
        free_at[s] = end;
        makespan = std::max(makespan, end);
        ++next[s];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) return -1;
  }
  return makespan;
}

}  // namespace

TEST_CASE("GPipe: all forwards, then all backwards, in windows of `active`", "[schedule]") {
  const int p = GENERATE(1, 2, 4, 8);
  const int m = GENERATE(1, 3, 4, 8, 12);
  for (int s = 0; s < p; ++s) {
    INFO("p " << p << " m " << m << " stage " << s);
    SECTION("active >= m (or 0 = no cap): the stage holds all m micro-batches") {
      for (int active : {0, m, m + 5}) {
        const auto steps = schedule_gpipe(p, m, s, active);
        CHECK(check_complete_and_peak(steps, m, 1) == m);
        CHECK(peak_in_flight(steps, 1) == m);
        CHECK(forwards_before_first_backward(steps) == m);
        for (int i = 0; i < m; ++i) {
          CHECK(steps[i] == ScheduleStep{true, i, 0});
          CHECK(steps[m + i] == ScheduleStep{false, i, 0});
        }
      }
    }
    SECTION("active < m: windows of `active` micro-batches, each forwards then backwards") {
      for (int active = 1; active < m; ++active) {
        INFO("active " << active);
        const auto steps = schedule_gpipe(p, m, s, active);
        CHECK(check_complete_and_peak(steps, m, 1) == active);
        CHECK(peak_in_flight(steps, 1) == active);
        // Window w covers micro-batches [w a, min(m, (w+1) a)).
        std::size_t i = 0;
        for (int start = 0; start < m; start += active) {
          const int end = std::min(m, start + active);
          for (int mb = start; mb < end; ++mb) CHECK(steps.at(i++) == ScheduleStep{true, mb, 0});
          for (int mb = start; mb < end; ++mb) CHECK(steps.at(i++) == ScheduleStep{false, mb, 0});
        }
      }
    }
  }
}

TEST_CASE("1F1B: warm-up of p - s - 1 forwards, then one forward / one backward", "[schedule]") {
  const int p = GENERATE(1, 2, 3, 4, 8);
  const int m = GENERATE(1, 2, 4, 7, 16);
  for (int s = 0; s < p; ++s) {
    INFO("p " << p << " m " << m << " stage " << s);
    const auto steps = schedule_1f1b(p, m, s, 0);
    const int held = std::min(p - s, m);
    CHECK(check_complete_and_peak(steps, m, 1) == held);
    CHECK(peak_in_flight(steps, 1) == held);
    // Warm-up p - s - 1, plus the first steady-state forward, precede the first backward.
    CHECK(forwards_before_first_backward(steps) == std::min(p - s - 1 + 1, m));
    // Micro-batches go forward, and backward, in order 0, 1, ..., m - 1.
    std::vector<int> f, b;
    for (const auto& st : steps) (st.forward ? f : b).push_back(st.microbatch);
    for (int i = 0; i < m; ++i) {
      CHECK(f.at(i) == i);
      CHECK(b.at(i) == i);
    }
    // Steady state strictly alternates: after the warm-up, F B F B ... then the cool-down.
    if (m > p - s - 1) {
      const int warm = p - s - 1;
      for (int k = 0; k < m - warm; ++k) {
        CHECK(steps.at(warm + 2 * k).forward);
        CHECK_FALSE(steps.at(warm + 2 * k + 1).forward);
      }
    }
    // The last stage never holds more than one micro-batch.
    if (s == p - 1) CHECK(peak_in_flight(steps, 1) == 1);
  }
}

TEST_CASE("1F1B: active_microbatches caps the warm-up", "[schedule]") {
  const int p = 8, m = 16;
  for (int active = 1; active <= 10; ++active) {
    for (int s = 0; s < p; ++s) {
      INFO("active " << active << " stage " << s);
      const auto steps = schedule_1f1b(p, m, s, active);
      const int held = std::min({p - s, m, active});
      CHECK(check_complete_and_peak(steps, m, 1) == held);
      CHECK(peak_in_flight(steps, 1) == held);
      CHECK(forwards_before_first_backward(steps) == held);
    }
  }
  // active = 1: no pipelining at all on any stage: F0 B0 F1 B1 ...
  const auto one = schedule_1f1b(4, 3, 0, 1);
  const std::vector<ScheduleStep> expected{{true, 0, 0}, {false, 0, 0}, {true, 1, 0},
                                           {false, 1, 0}, {true, 2, 0}, {false, 2, 0}};
  CHECK(one == expected);
}

TEST_CASE("interleaved 1F1B: every chunk of every micro-batch once each way", "[schedule]") {
  const int p = GENERATE(2, 3, 4);
  const int v = GENERATE(2, 3, 4);
  const int groups = GENERATE(1, 2, 3, 5);
  const int m = groups * p;  // Megatron needs m to be a multiple of p (check_job enforces it)
  for (int s = 0; s < p; ++s) {
    INFO("p " << p << " v " << v << " m " << m << " stage " << s);
    const auto steps = schedule_interleaved(p, m, v, s, 0);
    const int peak_chunks = check_complete_and_peak(steps, m, v);
    // Warm-up (p - s - 1) * 2 + (v - 1) * p chunk forwards, plus the first steady one,
    // bounded by the m v chunks there are.
    const int expected_chunks = std::min((p - s - 1) * 2 + (v - 1) * p + 1, m * v);
    CHECK(peak_chunks == expected_chunks);
    CHECK(peak_in_flight(steps, v) == Approx(static_cast<double>(expected_chunks) / v).epsilon(1e-12));
    // On each rank, a micro-batch's chunk c runs forward before its chunk c + 1, and its
    // chunk c + 1 runs backward before its chunk c (the model order).
    std::map<Item, std::size_t> at_f, at_b;
    for (std::size_t i = 0; i < steps.size(); ++i) (steps[i].forward ? at_f : at_b)[{steps[i].microbatch, steps[i].chunk}] = i;
    for (int mb = 0; mb < m; ++mb)
      for (int c = 0; c + 1 < v; ++c) {
        CHECK(at_f[{mb, c}] < at_f[{mb, c + 1}]);
        CHECK(at_b[{mb, c + 1}] < at_b[{mb, c}]);
      }
  }
}

TEST_CASE("interleaved 1F1B: stage 0 holds p + (p - 1) / v micro-batches", "[schedule]") {
  // Korthikanti et al. 2022, section 4.2.3: with m a multiple of p and at least
  // p + (p - 1) / v, the first stage holds p + (p - 1) / v whole-stage micro-batches.
  struct Case { int p, v, m; };
  for (const Case c : {Case{2, 2, 4}, Case{4, 2, 8}, Case{4, 2, 16}, Case{4, 3, 8}, Case{8, 2, 16},
                       Case{8, 4, 32}, Case{3, 3, 6}}) {
    INFO("p " << c.p << " v " << c.v << " m " << c.m);
    const auto steps = schedule_interleaved(c.p, c.m, c.v, 0, 0);
    CHECK(peak_in_flight(steps, c.v) == Approx(c.p + (c.p - 1.0) / c.v).epsilon(1e-12));
    // More than 1F1B's p, fewer than GPipe's m.
    CHECK(peak_in_flight(steps, c.v) > c.p);
  }
  // p = 4, v = 2: 4 + 3/2 = 5.5 micro-batches = 11 chunks.
  CHECK(peak_in_flight(schedule_interleaved(4, 8, 2, 0, 0), 2) == 5.5);
}

TEST_CASE("interleaved 1F1B ignores active_microbatches (its warm-up is structural)", "[schedule]") {
  for (int active : {1, 2, 3, 6}) {
    INFO("active " << active);
    CHECK(schedule_interleaved(4, 8, 2, 0, active) == schedule_interleaved(4, 8, 2, 0, 0));
  }
}

TEST_CASE("schedule_steps dispatches on the job's pipeline setting", "[schedule]") {
  ParallelConfig pc;
  pc.pipeline_parallel_degree = 2;
  pc.microbatches = 8;
  SECTION("simple = GPipe, windows of active_microbatches (default p + 2 = 4)") {
    pc.pipeline = PipelineSchedule::gpipe;
    const auto steps = schedule_steps(pc, 0);
    CHECK(peak_in_flight(steps, 1) == 4);
    CHECK(steps == schedule_gpipe(2, 8, 0, 4));
    pc.active_microbatches = 8;
    CHECK(peak_in_flight(schedule_steps(pc, 1), 1) == 8);
  }
  SECTION("interleaved with one chunk = 1F1B") {
    pc.pipeline = PipelineSchedule::one_f_one_b;
    CHECK(schedule_steps(pc, 0) == schedule_1f1b(2, 8, 0, 0));
    CHECK(peak_in_flight(schedule_steps(pc, 0), 1) == 2);
    CHECK(peak_in_flight(schedule_steps(pc, 1), 1) == 1);
  }
  SECTION("interleaved with virtual stages") {
    pc.pipeline = PipelineSchedule::one_f_one_b;
    pc.virtual_stages = 2;
    CHECK(schedule_steps(pc, 0) == schedule_interleaved(2, 8, 2, 0, 0));
  }
}

TEST_CASE("the memory model's in-flight count is the schedule's peak", "[schedule][memory]") {
  // memory.hpp's in_flight_microbatches sizes stored activations; it must agree with what
  // the schedule the programs run actually holds.
  const int p = GENERATE(1, 2, 4, 8);
  const int groups = GENERATE(1, 2, 4);
  const int m = groups * p;
  for (PipelineSchedule sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    for (int v : {1, 2}) {
      if (v > 1 && (sched == PipelineSchedule::gpipe || p == 1)) continue;
      for (int active : {0, 1, 3, 100}) {
        if (v > 1 && active != 0) continue;
        ParallelConfig pc;
        pc.pipeline_parallel_degree = p;
        pc.microbatches = m;
        pc.pipeline = sched;
        pc.virtual_stages = v;
        pc.active_microbatches = active;
        for (int s = 0; s < p; ++s) {
          INFO(to_string(sched) << " p " << p << " m " << m << " v " << v << " active " << active << " stage " << s);
          CHECK(in_flight_microbatches(pc, s) == Approx(peak_in_flight(schedule_steps(pc, s), v)).epsilon(1e-12));
        }
      }
    }
  }
}

TEST_CASE("the pipeline harness detects a deadlock", "[schedule]") {
  // Stage 0 runs F0 B0 F1 B1 but stage 1 runs F0 F1 B0 B1: stage 1's F1 needs stage 0's
  // F1, which waits for B0, which waits for stage 1's B0, queued behind F1.
  const std::vector<std::vector<ScheduleStep>> st{
      {{true, 0, 0}, {false, 0, 0}, {true, 1, 0}, {false, 1, 0}},
      {{true, 0, 0}, {true, 1, 0}, {false, 0, 0}, {false, 1, 0}}};
  CHECK(execute_pipeline(st, 2, 1, 1.0, 2.0) == -1);
}

TEST_CASE("all stages together: no deadlock, and the classic makespan", "[schedule]") {
  // Uniform chunks: forward f, backward b = 2f per chunk; a whole stage does v chunks.
  const double f = 1.0, b = 2.0;
  SECTION("GPipe: (m + p - 1)(f + b)") {
    for (int p : {1, 2, 4, 8})
      for (int m : {1, 4, 8, 13}) {
        std::vector<std::vector<ScheduleStep>> st;
        for (int s = 0; s < p; ++s) st.push_back(schedule_gpipe(p, m, s, 0));
        INFO("p " << p << " m " << m);
        CHECK(execute_pipeline(st, p, 1, f, b) == Approx((m + p - 1) * (f + b)).epsilon(1e-12));
      }
  }
  SECTION("GPipe in windows of a (a divides m): m / a windows of (a + p - 1)(f + b)") {
    const int p = 4, m = 12;
    for (int a : {1, 2, 3, 4, 6}) {
      std::vector<std::vector<ScheduleStep>> st;
      for (int s = 0; s < p; ++s) st.push_back(schedule_gpipe(p, m, s, a));
      INFO("active " << a);
      CHECK(execute_pipeline(st, p, 1, f, b) == Approx((m / a) * (a + p - 1) * (f + b)).epsilon(1e-12));
    }
  }
  SECTION("1F1B: (m + p - 1)(f + b), the same bubble as GPipe") {
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, 4, 8, 13}) {
        std::vector<std::vector<ScheduleStep>> st;
        for (int s = 0; s < p; ++s) st.push_back(schedule_1f1b(p, m, s, 0));
        INFO("p " << p << " m " << m);
        CHECK(execute_pipeline(st, p, 1, f, b) == Approx((m + p - 1) * (f + b)).epsilon(1e-12));
      }
  }
  SECTION("1F1B with active 1: no overlap between micro-batches, m p (f + b)") {
    const int p = 4, m = 5;
    std::vector<std::vector<ScheduleStep>> st;
    for (int s = 0; s < p; ++s) st.push_back(schedule_1f1b(p, m, s, 1));
    CHECK(execute_pipeline(st, p, 1, f, b) == Approx(m * p * (f + b)).epsilon(1e-12));
  }
  SECTION("interleaved: (m + (p - 1) / v)(f + b) per whole-stage f, b") {
    for (int p : {2, 4})
      for (int v : {2, 3, 4})
        for (int groups : {2, 3}) {
          const int m = groups * p;
          std::vector<std::vector<ScheduleStep>> st;
          for (int s = 0; s < p; ++s) st.push_back(schedule_interleaved(p, m, v, s, 0));
          INFO("p " << p << " v " << v << " m " << m);
          // Per chunk f / v and b / v.
          const double span = execute_pipeline(st, p, v, f / v, b / v);
          CHECK(span == Approx((m + (p - 1.0) / v) * (f + b)).epsilon(1e-12));
        }
  }
}

// remembered_schedule_steps (the memory figure's and the makespan's walks, kept per
// thread) gives the schedule schedule_steps builds.
TEST_CASE("a remembered schedule is the one built afresh") {
  ParallelConfig pc;
  for (PipelineSchedule s : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b, PipelineSchedule::zb_h1,
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
