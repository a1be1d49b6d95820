#include "validation.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace partune::cli {

namespace {

constexpr OpKind kAllKinds[] = {OpKind::forward,        OpKind::recompute,       OpKind::backward,
                                OpKind::send_activation, OpKind::recv_activation, OpKind::send_gradient,
                                OpKind::recv_gradient,   OpKind::all_reduce,      OpKind::all_gather,
                                OpKind::reduce_scatter,  OpKind::optimizer_step,  OpKind::offload,
                                OpKind::reload,          OpKind::wait};
constexpr CommGroup kAllGroups[] = {CommGroup::none,    CommGroup::tensor,  CommGroup::data,
                                    CommGroup::sharded, CommGroup::replica, CommGroup::embedding};

bool kind_from_name(const std::string& name, OpKind* out) {
  for (OpKind k : kAllKinds)
    if (name == to_string(k)) {
      *out = k;
      return true;
    }
  return false;
}

bool group_from_name(const std::string& name, CommGroup* out) {
  for (CommGroup g : kAllGroups)
    if (name == to_string(g)) {
      *out = g;
      return true;
    }
  return false;
}

// Ranks of a program set, in the order given, and the largest rank (sizes the tables).
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

}  // namespace

std::vector<MeasuredEvent> read_measured_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read the measured trace", path));
  nlohmann::json doc;
  try {
    in >> doc;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not a JSON trace: {}", path, e.what()));
  }
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw std::runtime_error(fmt::format("{}: traceEvents: missing", path));
  std::vector<MeasuredEvent> out;
  std::size_t index = 0;
  for (const auto& e : doc["traceEvents"]) {
    ++index;
    if (e.value("ph", "") != "X") continue;
    MeasuredEvent m;
    const std::string name = e.value("name", "");
    if (!kind_from_name(name, &m.kind))
      throw std::runtime_error(
          fmt::format("{}: traceEvents[{}].name: '{}' is not an instruction kind", path, index - 1, name));
    if (!e.contains("args") || !e["args"].contains("rank") || !e.contains("ts") || !e.contains("dur"))
      throw std::runtime_error(fmt::format("{}: traceEvents[{}]: needs ts, dur and args.rank", path, index - 1));
    const auto& a = e["args"];
    m.rank = a["rank"].get<int>();
    m.microbatch = a.value("microbatch", -1);
    m.chunk = a.value("chunk", 0);
    m.layer = a.value("layer", -1);
    if (a.contains("group") && !group_from_name(a["group"].get<std::string>(), &m.group))
      throw std::runtime_error(fmt::format("{}: traceEvents[{}].args.group: '{}' is not a communicator", path,
                                           index - 1, a["group"].get<std::string>()));
    m.start = e["ts"].get<double>() * 1e-6;
    m.end = m.start + e["dur"].get<double>() * 1e-6;
    out.push_back(m);
  }
  return out;
}

KindTimes predicted_kind_times(const std::vector<RankProgram>& programs, const sim::SimResult& result) {
  const int world = world_of(programs);
  std::vector<std::vector<const TraceEvent*>> thread(static_cast<std::size_t>(world));
  for (const auto& e : result.events)
    if (e.stream <= 1 && e.rank < world) thread[static_cast<std::size_t>(e.rank)].push_back(&e);
  std::vector<double> end_time(static_cast<std::size_t>(world), 0.0);
  for (const auto& r : result.ranks)
    if (r.rank < world) end_time[static_cast<std::size_t>(r.rank)] = r.end_time;

  KindTimes total;
  for (const RankProgram& p : programs) {
    const auto& events = thread[static_cast<std::size_t>(p.rank)];
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
    if (pending && end_time[static_cast<std::size_t>(p.rank)] > t)
      total[pending_kind] += end_time[static_cast<std::size_t>(p.rank)] - t;
  }
  for (auto& [k, v] : total) v /= static_cast<double>(programs.size());
  return total;
}

MeasuredSteps split_measured_steps(const std::vector<RankProgram>& programs,
                                   const std::vector<MeasuredEvent>& events, int steps) {
  const int world = world_of(programs);
  std::vector<std::vector<const MeasuredEvent*>> by_rank(static_cast<std::size_t>(world));
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
        const MeasuredEvent& e = *mine[static_cast<std::size_t>(s) * n + i];
        const Instruction& in = p.ops[i];
        if (e.kind != in.kind)
          throw std::runtime_error(fmt::format("measured trace of rank {}, step {}: event {} is {}, its program has {} there",
                                               p.rank, s + 1, i, to_string(e.kind), to_string(in.kind)));
        const OpKind kind = booked_kind(p, i);
        out.kind_times[static_cast<std::size_t>(s)][kind] += e.end - e.start;
        // The simulator's layout: synchronous work on the program's stream 0, waits on
        // sends and copies on stream 1, on collectives on the communicator's stream; the
        // issue of asynchronous work (an instant there) is left out of the timeline.
        if (in.async) continue;
        TraceEvent t;
        t.rank = p.rank;
        t.kind = kind;
        if (in.kind == OpKind::wait) {
          const Instruction& awaited = p.ops[static_cast<std::size_t>(in.wait_for)];
          t.group = awaited.group;
          t.stream = is_collective(awaited.kind) ? 2 + static_cast<int>(awaited.group) : 1;
        } else {
          t.group = in.group;
          t.stream = 0;
        }
        t.microbatch = e.microbatch;
        t.chunk = e.chunk;
        t.layer = e.layer;
        t.start = e.start - origin;
        t.end = e.end - origin;
        out.events[static_cast<std::size_t>(s)].push_back(t);
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

std::vector<std::string> event_kind_names(const std::vector<MeasuredEvent>& events) {
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

}  // namespace partune::cli
