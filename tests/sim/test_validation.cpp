// validate/validation.hpp and sim/explain.hpp: predicted against measured, and the estimator
// against the simulation, on timelines and breakdowns written out by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "partune/sim/explain.hpp"
#include "partune/validate/validation.hpp"

using namespace partune;

namespace {

Instruction op(OpKind kind, bool async = false, int wait_for = -1, CommGroup group = CommGroup::none) {
  Instruction in;
  in.kind = kind;
  in.async = async;
  in.wait_for = wait_for;
  in.group = group;
  return in;
}

// forward; all_reduce (async, tensor group); forward; wait for the all-reduce; backward.
std::vector<RankProgram> one_rank_program() {
  RankProgram p;
  p.rank = 0;
  p.ops = {op(OpKind::forward), op(OpKind::all_reduce, true, -1, CommGroup::tensor), op(OpKind::forward),
           op(OpKind::wait, false, 1), op(OpKind::backward)};
  return {p};
}

TraceEvent event(OpKind kind, double start, double end, int stream = 0) {
  TraceEvent e;
  e.kind = kind;
  e.start = start;
  e.end = end;
  e.stream = stream;
  return e;
}

// One measured step starting at t0: the all-reduce's issue takes `issue`, its wait `wait`.
void add_step(std::vector<TraceEvent>& out, double t0, double issue, double wait) {
  double t = t0;
  auto push = [&](OpKind k, double d) {
    out.push_back(event(k, t, t + d));
    t += d;
  };
  push(OpKind::forward, 1.0);
  push(OpKind::all_reduce, issue);
  push(OpKind::forward, 1.0);
  push(OpKind::wait, wait);
  push(OpKind::backward, 2.0);
}

// The simulator's view: forward [0, 1], forward [1.05, 2.05], the all-reduce on the
// tensor communicator's stream, backward [3, 5]: the program waited 2.05 .. 3.
sim::SimResult predicted_run() {
  sim::SimResult r;
  r.events = {event(OpKind::forward, 0, 1), event(OpKind::all_reduce, 1, 2.5, 3), event(OpKind::forward, 1.05, 2.05),
              event(OpKind::backward, 3, 5), event(OpKind::reduce_scatter, 4, 4.5, 5)};
  r.ranks.resize(1);
  r.ranks[0].end_time = 5;
  r.ranks[0].peak_memory = 0.5e9 + 1000;
  r.metrics.step_time = 5.0;
  return r;
}

Job one_rank_job() {
  Job j;
  j.cluster.nodes = 1;
  j.cluster.instance.gpus_per_node = 1;
  j.cluster.instance.gpu.reserved_bytes = 0.5e9;
  return j;
}

}  // namespace

TEST_CASE("the simulator's time per kind books a wait on a collective to the collective", "[validation]") {
  const validate::KindTimes t = validate::predicted_kind_times(one_rank_program(), predicted_run());
  CHECK(t.at(OpKind::forward) == Approx(2.0));
  CHECK(t.at(OpKind::all_reduce) == Approx(3.0 - 2.05));
  CHECK(t.at(OpKind::backward) == Approx(2.0));
  CHECK(t.size() == 3);
}

TEST_CASE("measured steps: split per step, waits booked to the awaited kind, on the simulator's streams",
          "[validation]") {
  std::vector<TraceEvent> measured;
  add_step(measured, 0, 0.1, 0.5);
  add_step(measured, 10, 0.2, 1.0);
  const validate::MeasuredSteps m = validate::split_measured_steps(one_rank_program(), measured, 2);
  REQUIRE(m.kind_times.size() == 2);
  CHECK(m.kind_times[0].at(OpKind::all_reduce) == Approx(0.1 + 0.5));
  CHECK(m.kind_times[1].at(OpKind::all_reduce) == Approx(0.2 + 1.0));
  CHECK(m.kind_times[1].at(OpKind::forward) == Approx(2.0));
  // Step 2 from its own start; the issue of the all-reduce left out, its wait on stream 2 + tensor.
  const auto& e = m.events[1];
  REQUIRE(e.size() == 4);
  CHECK(e[1].kind == OpKind::forward);
  CHECK(e[1].start == Approx(1.2));
  CHECK(e[2].kind == OpKind::all_reduce);
  CHECK(e[2].stream == 3);
  CHECK(e[2].group == CommGroup::tensor);
  CHECK(e[2].start == Approx(2.2));
  CHECK(e[2].end == Approx(3.2));
  CHECK(e[3].stream == 0);

  SECTION("events out of program order are an error naming rank and step") {
    std::swap(measured[6], measured[8]);  // the all-reduce and its wait
    CHECK_THROWS_WITH(validate::split_measured_steps(one_rank_program(), measured, 2),
                      Catch::Contains("rank 0, step 2"));
  }
  SECTION("too few events for the steps") {
    measured.pop_back();
    CHECK_THROWS_WITH(validate::split_measured_steps(one_rank_program(), measured, 2), Catch::Contains("has 9 events"));
  }
}

TEST_CASE("a job's comparison: the steps after the warm-up, their low quantile and medians", "[validation]") {
  validate::MeasuredRun run;
  add_step(run.events, 0, 0.1, 0.5);
  add_step(run.events, 10, 0.2, 1.0);
  add_step(run.events, 20, 0.1, 0.4);
  add_step(run.events, 30, 0.1, 0.6);
  run.step_seconds = {4.6, 5.2, 4.5, 4.9};
  run.peak_bytes = {{900}, {1000}, {1100}, {1050}};
  const validate::Comparison c =
      validate::compare_with_measurement(one_rank_job(), one_rank_program(), predicted_run(), run, 1);
  CHECK(c.timed_seconds == std::vector<double>{5.2, 4.5, 4.9});
  // Sorted 4.5 4.9 5.2: the 20th percentile at position 0.4 is 4.5 + 0.4 x 0.4 = 4.66.
  CHECK(c.measured_step_s == Approx(4.66));
  CHECK(c.measured.median == Approx(4.9));
  CHECK(c.step_error_pct == Approx(100 * (5.0 - 4.66) / 4.66));
  REQUIRE(c.kinds.size() == 3);  // OpKind order: forward, backward, all_reduce
  CHECK(c.kinds[0].kind == OpKind::forward);
  CHECK(c.kinds[0].error_pct == Approx(0).margin(1e-9));
  CHECK(c.kinds[2].kind == OpKind::all_reduce);
  CHECK(c.kinds[2].measured_s == Approx(0.7));  // median of 1.2, 0.5, 0.7
  CHECK(c.kinds[2].predicted_s == Approx(0.95));
  REQUIRE(c.memory.size() == 1);
  CHECK(c.memory[0].predicted_bytes == Approx(1000));  // the reserved 0.5 GB left out
  CHECK(c.memory[0].measured_bytes == 1100);           // the largest over the timed steps
  CHECK(c.missing_measured_kinds == std::vector<std::string>{"reduce_scatter"});
  CHECK(c.median_step == 3);  // 4.9 s, the median itself
  CHECK(c.median_step_events.size() == 4);

  SECTION("no step after the warm-up") {
    CHECK_THROWS_WITH(validate::compare_with_measurement(one_rank_job(), one_rank_program(), predicted_run(), run, 4),
                      Catch::Contains("none after the 4 warm-up steps"));
  }
  SECTION("the suite's summary") {
    const validate::SuiteSummary s = validate::summarize({{"a", &c}, {"b", nullptr}});
    CHECK(s.jobs == 2);
    CHECK(s.failed == 1);
    CHECK(s.worst_job == "a");
    CHECK(s.worst_abs_step_error_pct == Approx(100 * 0.34 / 4.66));
    CHECK(s.median_abs_memory_error_pct == Approx(100 * 100.0 / 1100));
    CHECK(std::isnan(validate::summarize({{"b", nullptr}}).median_abs_step_error_pct));
  }
}

TEST_CASE("estimator against simulation: the six parts and the largest difference", "[validation]") {
  Estimate e;
  e.step_time = 1.75;
  e.breakdown.compute = 1.0;
  e.breakdown.optimizer = 0.1;
  e.breakdown.tensor_parallel_comm = 0.2;
  e.breakdown.pipeline_bubble = 0.3;
  e.breakdown.pipeline_p2p = 0.05;
  e.breakdown.data_parallel_exposed = 0.1;
  sim::SimResult r;
  r.metrics.step_time = 2.2;
  r.metrics.breakdown.compute = 1.1;
  r.exposed.tensor = 0.25;
  r.exposed.data = 0.4;
  const sim::EstimatorVsSimulation x = sim::explain_difference(e, r);
  REQUIRE(x.parts.size() == 6);
  CHECK(x.parts[0].estimated_s == Approx(1.1));
  CHECK(x.parts[2].estimated_s == Approx(0.35));
  CHECK(x.parts[2].simulated_s == Approx(2.2 - 1.1 - 0.25 - 0.4));  // what is left is pipeline
  CHECK(x.largest == 3);
  CHECK(x.parts[3].name == "data-parallel gradients (exposed)");
  CHECK_FALSE(x.agree);
  CHECK(x.difference_pct == Approx(100 * (2.2 / 1.75 - 1)));
  CHECK_THAT(x.why, Catch::Contains("share the NICs"));

  // Every part within 0.02 s of the estimator's: within 2% of its 1.75 s step.
  r.exposed.tensor = 0.2;
  r.exposed.data = 0.12;
  r.metrics.step_time = 1.1 + 0.2 + 0.12 + 0.35;
  CHECK(sim::explain_difference(e, r).agree);
}
