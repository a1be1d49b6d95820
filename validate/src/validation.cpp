#include "partune/validate/validation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <stdexcept>

namespace partune::validate {

namespace {

// Ranks of a program set: the largest rank + 1 (sizes the tables).
int world_of(const std::vector<RankProgram>& programs) {
  int n = 0;
  for (const auto& p : programs) n = std::max(n, p.rank + 1);
  return n;
}

// What a measured or simulated event is booked as: a wait is time spent on the awaited
// instruction.
OpKind booked_kind(const RankProgram& p, std::size_t i) {
  const Instruction& in = p.ops[i];
  return in.kind == OpKind::wait ? p.ops[static_cast<std::size_t>(in.wait_for)].kind : in.kind;
}

// The simulator records a program-thread event (streams 0 and 1) for exactly these.
bool simulator_records(const RankProgram& p, std::size_t i) {
  const Instruction& in = p.ops[i];
  if (in.kind == OpKind::wait) return !is_collective(p.ops[static_cast<std::size_t>(in.wait_for)].kind);
  return !in.async;
}

// One rank's program-thread events against its program: the time of each kind.
void add_rank_kind_times(const RankProgram& p, const std::vector<const TraceEvent*>& events, double end_time,
                         KindTimes& total) {
  std::size_t next = 0;
  double t = 0;
  bool pending = false;  // waits on collectives since the last recorded event
  OpKind pending_kind = OpKind::all_reduce;
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    if (!simulator_records(p, i)) {
      if (p.ops[i].kind == OpKind::wait) {
        pending = true;
        pending_kind = booked_kind(p, i);
      }
      continue;
    }
    if (next >= events.size())
      throw std::runtime_error(fmt::format(
          "simulated trace of rank {} has {} program events; its program needs more (instruction {} of {}, {})",
          p.rank, events.size(), i, p.ops.size(), to_string(p.ops[i].kind)));
    const TraceEvent& e = *events[next++];
    if (e.kind != booked_kind(p, i))
      throw std::runtime_error(fmt::format("simulated trace of rank {}: event {} is {}, its program has {} there",
                                           p.rank, next - 1, to_string(e.kind), to_string(booked_kind(p, i))));
    if (pending && e.start > t) total[pending_kind] += e.start - t;
    pending = false;
    total[e.kind] += e.end - e.start;
    t = e.end;
  }
  if (pending && end_time > t) total[pending_kind] += end_time - t;
}

// A measured event placed on the simulator's layout: synchronous work on the program's
// stream 0, waits on sends and copies on stream 1, on collectives on the communicator's
// stream.
TraceEvent as_simulated(const RankProgram& p, std::size_t i, const TraceEvent& e, double origin) {
  const Instruction& in = p.ops[i];
  TraceEvent t = e;
  t.kind = booked_kind(p, i);
  if (in.kind == OpKind::wait) {
    const Instruction& awaited = p.ops[static_cast<std::size_t>(in.wait_for)];
    t.group = awaited.group;
    t.stream = is_collective(awaited.kind) ? 2 + static_cast<int>(awaited.group) : 1;
  } else {
    t.group = in.group;
    t.stream = 0;
  }
  t.start = e.start - origin;
  t.end = e.end - origin;
  return t;
}

}  // namespace

KindTimes predicted_kind_times(const std::vector<RankProgram>& programs, const sim::SimResult& result) {
  const int world = world_of(programs);
  std::vector<std::vector<const TraceEvent*>> thread(static_cast<std::size_t>(world));
  for (const auto& e : result.events)
    if (e.stream <= 1 && e.rank < world) thread[static_cast<std::size_t>(e.rank)].push_back(&e);
  std::vector<double> end_time(static_cast<std::size_t>(world), 0.0);
  for (const auto& r : result.ranks)
    if (r.rank < world) end_time[static_cast<std::size_t>(r.rank)] = r.end_time;

  KindTimes total;
  for (const RankProgram& p : programs)
    add_rank_kind_times(p, thread[static_cast<std::size_t>(p.rank)], end_time[static_cast<std::size_t>(p.rank)],
                        total);
  for (auto& [k, v] : total) v /= static_cast<double>(programs.size());
  return total;
}

MeasuredSteps split_measured_steps(const std::vector<RankProgram>& programs, const std::vector<TraceEvent>& events,
                                   int steps) {
  const int world = world_of(programs);
  std::vector<std::vector<const TraceEvent*>> by_rank(static_cast<std::size_t>(world));
  for (const auto& e : events) {
    if (e.rank < 0 || e.rank >= world)
      throw std::runtime_error(fmt::format("measured trace: an event of rank {} in a world of {}", e.rank, world));
    by_rank[static_cast<std::size_t>(e.rank)].push_back(&e);
  }
  MeasuredSteps out;
  out.kind_times.assign(static_cast<std::size_t>(steps), KindTimes{});
  out.events.assign(static_cast<std::size_t>(steps), {});
  for (const RankProgram& p : programs) {
    const auto& mine = by_rank[static_cast<std::size_t>(p.rank)];
    const std::size_t n = p.ops.size();
    if (mine.size() != n * static_cast<std::size_t>(steps))
      throw std::runtime_error(fmt::format(
          "measured trace of rank {} has {} events; {} steps of its {} instructions make {}", p.rank, mine.size(),
          steps, n, n * static_cast<std::size_t>(steps)));
    for (int s = 0; s < steps; ++s) {
      const double origin = mine[static_cast<std::size_t>(s) * n]->start;
      for (std::size_t i = 0; i < n; ++i) {
        const TraceEvent& e = *mine[static_cast<std::size_t>(s) * n + i];
        if (e.kind != p.ops[i].kind)
          throw std::runtime_error(fmt::format("measured trace of rank {}, step {}: event {} is {}, its program has {} there",
                                               p.rank, s + 1, i, to_string(e.kind), to_string(p.ops[i].kind)));
        out.kind_times[static_cast<std::size_t>(s)][booked_kind(p, i)] += e.end - e.start;
        // The issue of asynchronous work (an instant in the simulator) is left out of the timeline.
        if (!p.ops[i].async) out.events[static_cast<std::size_t>(s)].push_back(as_simulated(p, i, e, origin));
      }
    }
  }
  for (auto& step : out.kind_times)
    for (auto& [k, v] : step) v /= static_cast<double>(programs.size());
  return out;
}

std::vector<std::string> event_kind_names(const std::vector<TraceEvent>& events) {
  std::set<std::string> names;
  for (const auto& e : events) names.insert(to_string(e.kind));
  return {names.begin(), names.end()};
}

double error_pct(double predicted, double measured) {
  if (!(measured > 0)) return std::numeric_limits<double>::quiet_NaN();
  return 100.0 * (predicted - measured) / measured;
}

double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

namespace {

// The steps after the warm-up: their times and each rank's largest peak over them.
void timed_steps(const MeasuredRun& m, int world, int warmup, Comparison& c, std::vector<double>& peak) {
  c.steps_run = static_cast<int>(m.step_seconds.size());
  if (c.steps_run <= warmup)
    throw std::runtime_error(fmt::format("the backend ran {} steps, none after the {} warm-up steps", c.steps_run, warmup));
  if (m.peak_bytes.size() != m.step_seconds.size())
    throw std::runtime_error(fmt::format("the backend reports peaks for {} of its {} steps", m.peak_bytes.size(),
                                         m.step_seconds.size()));
  peak.assign(static_cast<std::size_t>(world), 0.0);
  for (int s = warmup; s < c.steps_run; ++s) {
    c.timed_seconds.push_back(m.step_seconds[static_cast<std::size_t>(s)]);
    const auto& pb = m.peak_bytes[static_cast<std::size_t>(s)];
    if (static_cast<int>(pb.size()) != world)
      throw std::runtime_error(fmt::format("step {} reports {} peaks for {} ranks", s + 1, pb.size(), world));
    for (int r = 0; r < world; ++r)
      peak[static_cast<std::size_t>(r)] = std::max(peak[static_cast<std::size_t>(r)], pb[static_cast<std::size_t>(r)]);
  }
}

// Every kind either side has: the simulator's time against the median over the timed steps.
void compare_kinds(const KindTimes& predicted, const MeasuredSteps& measured, Comparison& c) {
  std::set<OpKind> kinds;
  for (const auto& [k, v] : predicted) kinds.insert(k);
  for (int s = c.warmup; s < c.steps_run; ++s)
    for (const auto& [k, v] : measured.kind_times[static_cast<std::size_t>(s)]) kinds.insert(k);
  std::set<std::string> measured_names;
  for (OpKind k : kinds) {
    std::vector<double> per_step;
    for (int s = c.warmup; s < c.steps_run; ++s) {
      const auto& kt = measured.kind_times[static_cast<std::size_t>(s)];
      const auto it = kt.find(k);
      per_step.push_back(it == kt.end() ? 0.0 : it->second);
      if (it != kt.end()) measured_names.insert(to_string(k));
    }
    const auto p = predicted.find(k);
    const double pv = p == predicted.end() ? 0.0 : p->second, mv = median(per_step);
    c.kinds.push_back({k, pv, mv, error_pct(pv, mv)});
  }
  c.measured_kinds.assign(measured_names.begin(), measured_names.end());
  for (const auto& n : c.predicted_kinds)
    if (!measured_names.count(n)) c.missing_measured_kinds.push_back(n);
}

}  // namespace

Comparison compare_with_measurement(const Job& ran, const std::vector<RankProgram>& programs,
                                    const sim::SimResult& predicted, const MeasuredRun& measured, int warmup) {
  Comparison c;
  c.warmup = warmup;
  std::vector<double> peak;
  timed_steps(measured, ran.world_size(), warmup, c, peak);
  c.predicted_step_s = predicted.metrics.step_time;
  c.measured = step_statistics({c.timed_seconds});
  c.measured_step_s = c.measured.low;
  c.step_error_pct = error_pct(c.predicted_step_s, c.measured_step_s);

  const MeasuredSteps steps = split_measured_steps(programs, measured.events, c.steps_run);
  c.predicted_kinds = event_kind_names(predicted.events);
  compare_kinds(predicted_kind_times(programs, predicted), steps, c);

  c.reserved_bytes_left_out = ran.cluster.instance.gpu.reserved_bytes;
  for (const auto& rr : predicted.ranks) {
    const double pv = rr.peak_memory - c.reserved_bytes_left_out, mv = peak[static_cast<std::size_t>(rr.rank)];
    c.memory.push_back({rr.rank, rr.stage, pv, mv, error_pct(pv, mv)});
  }

  c.median_step = warmup;
  for (int s = warmup; s < c.steps_run; ++s)
    if (std::abs(c.timed_seconds[static_cast<std::size_t>(s - warmup)] - c.measured.median) <
        std::abs(c.timed_seconds[static_cast<std::size_t>(c.median_step - warmup)] - c.measured.median))
      c.median_step = s;
  c.median_step_events = steps.events[static_cast<std::size_t>(c.median_step)];
  return c;
}

Comparison pool_runs(const std::vector<Comparison>& runs) {
  if (runs.empty()) throw std::invalid_argument("pool_runs: no run");
  std::vector<std::size_t> order(runs.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return runs[a].measured.low < runs[b].measured.low; });
  Comparison c = runs[order[(order.size() - 1) / 2]];  // the median run (the lower of two)
  std::vector<std::vector<double>> timed;
  c.timed_seconds.clear();
  for (const Comparison& r : runs) {
    timed.push_back(r.timed_seconds);
    c.timed_seconds.insert(c.timed_seconds.end(), r.timed_seconds.begin(), r.timed_seconds.end());
  }
  c.measured = step_statistics(timed);
  c.measured_step_s = c.measured.low;
  c.step_error_pct = error_pct(c.predicted_step_s, c.measured_step_s);
  c.within_noise = within_noise(c.step_error_pct, c.measured);
  return c;
}

SuiteSummary summarize(const std::vector<SuiteOutcome>& outcomes) {
  SuiteSummary s;
  s.jobs = static_cast<int>(outcomes.size());
  std::vector<double> step_errors, memory_errors, oversubscribed_errors;
  for (const SuiteOutcome& o : outcomes) {
    if (!o.comparison) {
      ++s.failed;
      continue;
    }
    const double e = std::abs(o.comparison->step_error_pct);
    if (o.comparison->within_noise) ++s.within_noise;
    if (o.oversubscribed) {
      ++s.oversubscribed;
      if (std::isfinite(e)) oversubscribed_errors.push_back(e);
    } else if (std::isfinite(e)) {
      step_errors.push_back(e);
      if (e > s.worst_abs_step_error_pct) s.worst_abs_step_error_pct = e, s.worst_job = o.job;
    }
    for (const auto& m : o.comparison->memory) {
      const double me = std::abs(m.error_pct);
      if (std::isfinite(me)) memory_errors.push_back(me);
    }
  }
  s.median_abs_step_error_pct = median(step_errors);
  s.oversubscribed_median_abs_step_error_pct = median(oversubscribed_errors);
  s.median_abs_memory_error_pct = median(memory_errors);
  return s;
}

}  // namespace partune::validate
