// cli/chrome_trace: what write_chrome_trace writes, read_chrome_trace reads back as the
// same TraceEvents (the one struct of both sides), and a bad file is an error naming it.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "partune/launch/chrome_trace.hpp"
#include "scratch_dir.hpp"

using namespace partune;
using partune::testing::ScratchDir;
using partune::launch::read_chrome_trace;
using partune::launch::write_chrome_trace;

namespace {

TraceEvent event(int rank, int stream, OpKind kind, CommGroup group, int mb, int chunk, int layer, int count,
                 double start, double end) {
  TraceEvent e;
  e.rank = rank;
  e.stream = stream;
  e.kind = kind;
  e.group = group;
  e.microbatch = mb;
  e.chunk = chunk;
  e.layer = layer;
  e.count = count;
  e.start = start;
  e.end = end;
  return e;
}

}  // namespace

TEST_CASE("cli: a Chrome trace written and read back gives the same events", "[cli][chrome_trace]") {
  const std::vector<TraceEvent> events = {
      event(0, 0, OpKind::forward, CommGroup::none, 3, 1, 7, 1, 0.0, 0.125),
      event(5, 3, OpKind::all_reduce, CommGroup::tensor, 2, 0, -1, 14, 0.25, 0.5),
      event(9, 1, OpKind::send_activation, CommGroup::none, -1, 0, -1, 1, 1.5, 2.0),
      event(12, 7, OpKind::all_reduce, CommGroup::embedding, -1, 0, -1, 1, 3.0, 3.0625)};
  ScratchDir dir("partune-trace");
  const std::string file = (dir.path / "t.json").string();
  write_chrome_trace(file, events, 8);
  const std::vector<TraceEvent> back = read_chrome_trace(file);
  REQUIRE(back.size() == events.size());
  for (std::size_t i = 0; i < events.size(); ++i) {
    INFO("event " << i);
    CHECK(back[i].rank == events[i].rank);
    CHECK(back[i].stream == events[i].stream);
    CHECK(back[i].kind == events[i].kind);
    CHECK(back[i].group == events[i].group);
    CHECK(back[i].microbatch == events[i].microbatch);
    CHECK(back[i].chunk == events[i].chunk);
    CHECK(back[i].layer == events[i].layer);
    CHECK(back[i].count == events[i].count);
    CHECK(back[i].start == Approx(events[i].start).margin(1e-12));
    CHECK(back[i].end == Approx(events[i].end).margin(1e-12));
  }
}

TEST_CASE("cli: a trace event that is no instruction kind is an error naming file and event", "[cli][chrome_trace]") {
  ScratchDir dir("partune-trace");
  const std::string file = (dir.path / "bad.json").string();
  std::ofstream(file) << R"({"traceEvents": [{"name": "thread_name", "ph": "M"},
      {"name": "fwd", "ph": "X", "ts": 0, "dur": 1, "args": {"rank": 0}}]})";
  CHECK_THROWS_WITH(read_chrome_trace(file),
                    Catch::Contains("bad.json") && Catch::Contains("traceEvents[1].name") && Catch::Contains("'fwd'"));
}
