#pragma once
// Small SVG charts for the --report pages: a scatter plot, stacked bars and lines. Each is
// one <svg> element (inline in HTML, so no namespace attribute) with its axes, ticks,
// legend and a <title> tooltip on every mark; no script. Non-finite values are left out.
// The same chart gives the same bytes (coordinates to 0.1 px).
//
// Elements, for a reader (and the tests) counting them: a scatter mark is one <circle>
// (a highlighted one adds a second, its ring); a bar's part is one <rect>, a part of 0 or
// less none; a line's point is one <circle>, and each run of two points or more without a
// gap one <polyline>; every legend entry is one <rect> swatch (a bar chart's legend leaves
// out the parts that are 0 in every bar); the axes, ticks, grid and reference lines are
// <line>s. A timeline's bar is one <rect>. A legend leaves out the styles no mark has.
#include <string>
#include <utility>
#include <vector>

namespace partune::report {

// A named horizontal (bars, lines) or vertical (scatter) line at a value: a limit.
struct ReferenceLine {
  std::string name;
  double at = 0;
};

struct MarkStyle {
  std::string name;   // the legend's
  std::string color;  // CSS colour
  bool filled = true;
};

struct ScatterMark {
  double x = 0, y = 0;
  int count = 1;           // marks merged into this one: drawn larger, the count beside it
  std::size_t style = 0;   // index into ScatterChart::styles
  bool highlighted = false;
  std::string label;       // written beside a highlighted mark
  std::string tooltip;
};

struct ScatterChart {
  std::string x_label, y_label;
  std::vector<MarkStyle> styles;
  std::vector<ScatterMark> marks;
  std::vector<ReferenceLine> x_lines;
};
std::string scatter_svg(const ScatterChart& chart);

struct BarChart {
  std::string y_label;
  std::string unit;                         // in tooltips: "1.23 GiB"
  std::vector<std::string> categories;      // one bar each, left to right
  std::vector<MarkStyle> layers;            // stacked bottom up
  std::vector<std::vector<double>> values;  // [category][layer]
  std::vector<ReferenceLine> lines;
  // A dash across each bar (NaN: none), e.g. a measured peak beside the parts' sum.
  std::string marks_name;
  std::vector<double> marks;
};
std::string bar_svg(const BarChart& chart);

struct LineSeries {
  std::string name;
  std::vector<double> y;  // one per x label; NaN: no point there
};

struct LineChart {
  std::string x_label, y_label, unit;
  std::vector<std::string> x_labels;  // evenly spaced, left to right
  std::vector<LineSeries> series;
  std::vector<ReferenceLine> lines;
};
std::string line_svg(const LineChart& chart);

// A timeline: rows of intervals (a rank's streams), time along x. Each bar is one <rect>.
struct TimelineBar {
  std::size_t row = 0;
  double start = 0, end = 0;  // seconds
  std::size_t style = 0;      // index into TimelineChart::styles
  std::string tooltip;
};

struct TimelineChart {
  std::string x_label;
  std::vector<std::string> rows;  // top to bottom
  std::vector<MarkStyle> styles;
  std::vector<TimelineBar> bars;
};
std::string timeline_svg(const TimelineChart& chart);

// Evenly spaced round values (1, 2 or 5 times a power of ten) covering [lo, hi], about
// `count` of them.
std::vector<double> nice_ticks(double lo, double hi, int count = 5);

// The palette the pages colour series and parts with, in order (20 colours, cycled).
const std::string& palette(std::size_t i);

}  // namespace partune::report
