// The simulated ranks' timelines (html_timeline.hpp).
#include "html_timeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "partune/report/report_units.hpp"

namespace partune::report {

namespace {

// What an event is drawn as: an index into styles(); -1 not drawn (a wait).
int style_of(const TraceEvent& e) {
  switch (e.kind) {
    case OpKind::forward: return 0;
    case OpKind::recompute: return 1;
    case OpKind::backward:
    case OpKind::backward_weight: return 2;
    case OpKind::send_activation:
    case OpKind::recv_activation:
    case OpKind::send_gradient:
    case OpKind::recv_gradient: return 3;
    case OpKind::offload:
    case OpKind::reload:
    case OpKind::offload_gradients:
    case OpKind::reload_parameters: return 8;
    case OpKind::optimizer_step: return 9;
    case OpKind::wait: return -1;
    default: break;  // a collective: by its communicator
  }
  switch (e.group) {
    case CommGroup::tensor: return 4;
    case CommGroup::sharded: return 6;
    case CommGroup::expert: return 7;
    default: return 5;  // data, replica, embedding
  }
}

std::vector<MarkStyle> styles() {
  const std::vector<std::string> names = {"forward",
                                          "recompute",
                                          "backward",
                                          "pipeline send/recv",
                                          "tensor-parallel collective",
                                          "data-parallel collective",
                                          "sharded collective",
                                          "expert all-to-all",
                                          "offload / reload",
                                          "optimizer step"};
  std::vector<MarkStyle> out;
  for (std::size_t i = 0; i < names.size(); ++i) out.push_back({names[i], palette(i), true});
  return out;
}

struct Interval {
  double start, end;
  int instructions;
};

}  // namespace

TimelineChart rank_timeline(const sim::SimResult& r, std::size_t max_ranks) {
  TimelineChart chart;
  chart.x_label = "seconds into the step";
  chart.styles = styles();
  std::set<int> ranks;
  for (const TraceEvent& e : r.events) ranks.insert(e.rank);
  std::map<int, std::size_t> row_of;  // rank -> its compute row (its other streams: the next)
  for (int rank : ranks) {
    if (row_of.size() >= max_ranks) break;
    row_of[rank] = chart.rows.size();
    chart.rows.push_back(fmt::format("{} compute", rank));
    chart.rows.push_back(fmt::format("{} other", rank));
  }
  // (row, style) -> the intervals, merged where they (nearly) touch.
  std::map<std::pair<std::size_t, int>, std::vector<Interval>> lanes;
  for (const TraceEvent& e : r.events) {
    const auto row = row_of.find(e.rank);
    const int style = style_of(e);
    if (row == row_of.end() || style < 0) continue;
    lanes[{row->second + (e.stream == 0 ? 0 : 1), style}].push_back({e.start, e.end, 1});
  }
  const double close = r.metrics.step_time / 2000;
  for (auto& [key, intervals] : lanes) {
    std::sort(intervals.begin(), intervals.end(),
              [](const Interval& a, const Interval& b) { return std::tie(a.start, a.end) < std::tie(b.start, b.end); });
    std::vector<Interval> merged;
    for (const Interval& i : intervals) {
      if (!merged.empty() && i.start <= merged.back().end + close) {
        merged.back().end = std::max(merged.back().end, i.end);
        ++merged.back().instructions;
      } else {
        merged.push_back(i);
      }
    }
    for (const Interval& m : merged)
      chart.bars.push_back({key.first, m.start, m.end, static_cast<std::size_t>(key.second),
                            fmt::format("{}: {} to {} ({} instruction{})", chart.styles[key.second].name,
                                        seconds(m.start), seconds(m.end), m.instructions,
                                        m.instructions == 1 ? "" : "s")});
  }
  return chart;
}

}  // namespace partune::report
