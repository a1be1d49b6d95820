#include "partune/launch/chrome_trace.hpp"

#include <fmt/format.h>

#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "partune/costmodel/scenario_writer.hpp"

namespace partune::launch {

namespace {

// Threads of a node's process: 8 per rank, one per stream.
constexpr int kStreamsPerRank = 10;  // compute, copies, and 2 + one per CommGroup

const char* stream_name(int stream) {
  switch (stream) {
    case 0: return "compute";
    case 1: return "p2p+copies";
    case 3: return "comm:tensor";
    case 4: return "comm:data";
    case 5: return "comm:sharded";
    case 6: return "comm:replica";
    case 7: return "comm:embedding";
  }
  return "comm";
}

template <typename E>
bool from_name(const std::string& name, E last, E* out) {
  for (int i = 0; i <= static_cast<int>(last); ++i)
    if (name == to_string(static_cast<E>(i))) {
      *out = static_cast<E>(i);
      return true;
    }
  return false;
}

nlohmann::json event_args(const TraceEvent& e) {
  nlohmann::json args = {{"rank", e.rank}};
  if (e.microbatch >= 0) args["microbatch"] = e.microbatch;
  args["chunk"] = e.chunk;
  if (e.layer >= 0) args["layer"] = e.layer;
  if (e.group != CommGroup::none) args["group"] = to_string(e.group);
  // A collective always says how many calls it stands for (the backend's measured tensor
  // calls may be 0 or 1 as well as the program's count); other events only when not 1.
  if (e.count != 1 || is_collective(e.kind)) args["count"] = e.count;
  return args;
}

// One complete ("X") event back into a TraceEvent; `where` names it in errors.
TraceEvent read_event(const nlohmann::json& e, const std::string& where) {
  TraceEvent t;
  const std::string name = e.value("name", "");
  if (!from_name(name, OpKind::wait, &t.kind))
    throw std::runtime_error(fmt::format("{}.name: '{}' is not an instruction kind", where, name));
  if (!e.contains("args") || !e["args"].contains("rank") || !e.contains("ts") || !e.contains("dur"))
    throw std::runtime_error(fmt::format("{}: needs ts, dur and args.rank", where));
  const auto& a = e["args"];
  t.rank = a["rank"].get<int>();
  t.microbatch = a.value("microbatch", -1);
  t.chunk = a.value("chunk", 0);
  t.layer = a.value("layer", -1);
  t.count = a.value("count", 1);
  if (a.contains("group") && !from_name(a["group"].get<std::string>(), CommGroup::expert_data, &t.group))
    throw std::runtime_error(
        fmt::format("{}.args.group: '{}' is not a communicator", where, a["group"].get<std::string>()));
  if (e.contains("tid")) t.stream = e["tid"].get<int>() - t.rank * kStreamsPerRank;
  t.start = e["ts"].get<double>() * 1e-6;
  t.end = t.start + e["dur"].get<double>() * 1e-6;
  return t;
}

}  // namespace

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events, int gpus_per_node) {
  AtomicFile file(path);
  write_chrome_trace(file, events, gpus_per_node);
}

void write_chrome_trace(AtomicFile& file, const std::vector<TraceEvent>& events, int gpus_per_node) {
  nlohmann::json trace = nlohmann::json::array();
  std::set<std::pair<int, int>> threads;
  for (const auto& e : events) {
    const int node = e.rank / gpus_per_node;
    const int tid = e.rank * kStreamsPerRank + e.stream;
    trace.push_back({{"name", to_string(e.kind)}, {"ph", "X"}, {"ts", e.start * 1e6},
                     {"dur", (e.end - e.start) * 1e6}, {"pid", node}, {"tid", tid}, {"args", event_args(e)}});
    if (threads.insert({node, tid}).second) {
      trace.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", node}, {"tid", tid},
                       {"args", {{"name", "rank " + std::to_string(e.rank) + " " + stream_name(e.stream)}}}});
    }
  }
  std::set<int> nodes;
  for (const auto& t : threads) nodes.insert(t.first);
  for (int n : nodes)
    trace.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", n}, {"args", {{"name", "node " + std::to_string(n)}}}});
  const nlohmann::json doc = {{"traceEvents", trace}, {"displayTimeUnit", "ms"}};
  file.write(doc.dump() + "\n");
  file.commit();
}

std::vector<TraceEvent> read_chrome_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot read the trace", path));
  nlohmann::json doc;
  try {
    in >> doc;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("{}: not a JSON trace: {}", path, e.what()));
  }
  if (!doc.contains("traceEvents") || !doc["traceEvents"].is_array())
    throw std::runtime_error(fmt::format("{}: traceEvents: missing", path));
  std::vector<TraceEvent> out;
  const auto& events = doc["traceEvents"];
  for (std::size_t i = 0; i < events.size(); ++i)
    if (events[i].value("ph", "") == "X")
      out.push_back(read_event(events[i], fmt::format("{}: traceEvents[{}]", path, i)));
  return out;
}

}  // namespace partune::launch
