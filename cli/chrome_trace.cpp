#include "chrome_trace.hpp"

#include <cstdio>
#include <fstream>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace partune::cli {

namespace {
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
}  // namespace

void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events,
                        int gpus_per_node) {
  nlohmann::json trace = nlohmann::json::array();
  std::set<std::pair<int, int>> threads;
  for (const auto& e : events) {
    const int node = e.rank / gpus_per_node;
    const int tid = e.rank * 8 + e.stream;
    nlohmann::json args = {{"rank", e.rank}};
    if (e.microbatch >= 0) args["microbatch"] = e.microbatch;
    args["chunk"] = e.chunk;
    if (e.layer >= 0) args["layer"] = e.layer;
    if (e.group != CommGroup::none) args["group"] = to_string(e.group);
    if (is_collective(e.kind)) args["count"] = e.count;
    trace.push_back({{"name", to_string(e.kind)}, {"ph", "X"}, {"ts", e.start * 1e6},
                     {"dur", (e.end - e.start) * 1e6}, {"pid", node}, {"tid", tid}, {"args", args}});
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
  const std::string tmp = path + ".partial";
  {
    std::ofstream out(tmp);
    if (!out) throw std::runtime_error("cannot write trace file " + tmp);
    out << doc.dump() << "\n";
    if (!out) throw std::runtime_error("cannot write trace file " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot move the trace into place at " + path);
  }
}

}  // namespace partune::cli
