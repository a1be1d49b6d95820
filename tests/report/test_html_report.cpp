// The --report pages' writers (report/'s html_page.hpp, svg_chart.hpp, html_report.hpp):
// escaping, the same bytes for the same input, and charts whose elements are counted here
// by hand from svg_chart.hpp's rules (one <rect> per drawn part and legend swatch, one
// <circle> per point and one more per highlighted mark, one <polyline> per unbroken run).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>

#include "partune/costmodel/scenario.hpp"
#include "partune/report/html_page.hpp"
#include "partune/report/html_report.hpp"
#include "partune/report/svg_chart.hpp"

using namespace partune;
using namespace partune::report;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Two bars of three parts; the second bar's middle part is 0 (not drawn), and one limit.
BarChart two_bars() {
  BarChart c;
  c.y_label = "GiB";
  c.unit = "GiB";
  c.categories = {"stage 0", "stage <1>"};
  c.layers = {{"parameters", "#111", true}, {"gradients", "#222", true}, {"activations & \"more\"", "#333", true}};
  c.values = {{1, 2, 3}, {4, 0, 5}};
  c.lines = {{"HBM", 40}};
  return c;
}

}  // namespace

TEST_CASE("html: escaping of the five markup characters", "[report][html]") {
  CHECK(html_escape("a<b & \"c\" 'd'>") == "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  CHECK(html_escape("plain text 1.5 GiB") == "plain text 1.5 GiB");
  CHECK(html_escape("") == "");

  HtmlPage page("job <x> & \"y\"");
  page.paragraph("1 < 2 & 3 > 2");
  page.table({"key<"}, {{"v&1"}, {"12.5 GiB"}});
  const std::string html = page.str();
  CHECK(html.rfind("<!DOCTYPE html>\n", 0) == 0);
  CHECK(count(html, "<title>job &lt;x&gt; &amp; &quot;y&quot;</title>") == 1);
  CHECK(count(html, "<p>1 &lt; 2 &amp; 3 &gt; 2</p>") == 1);
  CHECK(count(html, "<th>key&lt;</th>") == 1);
  CHECK(count(html, "<td>v&amp;1</td>") == 1);
  CHECK(count(html, "<td class=\"n\">12.5 GiB</td>") == 1);  // a number: right-aligned
  CHECK(count(html, "<script") == 0);
  CHECK(count(html, "http") == 0);  // nothing outside the page
}

TEST_CASE("svg: a bar chart's elements, counted by hand", "[report][html]") {
  const std::string svg = bar_svg(two_bars());
  CHECK(count(svg, "<svg ") == 1);
  CHECK(count(svg, "</svg>") == 1);
  // Parts drawn: 3 in the first bar, 2 in the second (its 0 is left out); 3 legend swatches.
  CHECK(count(svg, "<rect") == 5 + 3);
  CHECK(count(svg, "<title>") == 5);
  // The escaped names: in the tooltips and the legend.
  CHECK(count(svg, "stage &lt;1&gt;: parameters: 4 GiB") == 1);
  CHECK(count(svg, "activations &amp; &quot;more&quot;") == 3);  // 2 tooltips, 1 legend
  // The limit: a dashed line in the plot and one in the legend.
  CHECK(count(svg, "class=\"ref\"") == 2);
  CHECK(count(svg, "<circle") == 0);
}

TEST_CASE("svg: a bar chart's legend leaves out a part that is 0 in every bar", "[report][html]") {
  BarChart c = two_bars();
  c.values = {{1, 0, 3}, {4, 0, 5}};
  const std::string svg = bar_svg(c);
  CHECK(count(svg, "<rect") == 4 + 2);
  CHECK(count(svg, ">gradients<") == 0);
}

TEST_CASE("svg: a scatter's marks, merged counts, the highlighted ring and non-finite points", "[report][html]") {
  ScatterChart c;
  c.x_label = "headroom (GiB)";
  c.y_label = "samples/s";
  c.styles = {{"simulated", "#1f77b4", true}, {"estimated", "#7f7f7f", false}};
  c.marks = {{4.5, 90, 1, 0, true, "best", "winner"},
             {8.5, 88, 3, 1, false, "", "3 candidates"},
             {2.0, 87, 1, 0, false, "", "one"},
             {kNaN, 80, 1, 0, false, "", "left out"}};
  c.x_lines = {{"required headroom", 4}};
  const std::string svg = scatter_svg(c);
  CHECK(count(svg, "<circle") == 3 + 1);  // three finite marks, the winner's ring
  CHECK(count(svg, "<rect") == 2);        // the legend's swatches
  CHECK(count(svg, "<title>") == 3);
  CHECK(count(svg, ">x3</text>") == 1);   // the merged mark's count
  CHECK(count(svg, ">best</text>") == 1);
  CHECK(count(svg, "left out") == 0);
  CHECK(count(svg, "class=\"ref\"") == 2);
}

TEST_CASE("svg: a line chart breaks its line at a gap", "[report][html]") {
  LineChart c;
  c.x_label = "nodes";
  c.y_label = "samples/s";
  c.x_labels = {"8", "16", "32", "64"};
  c.series = {{"tp=2", {1, 2, kNaN, 4}}, {"tp=4", {1, 1, 1, 1}}};
  const std::string svg = line_svg(c);
  CHECK(count(svg, "<circle") == 3 + 4);
  CHECK(count(svg, "<polyline") == 1 + 1);  // tp=2: the run 8-16 (64 stands alone); tp=4: one run
  CHECK(count(svg, "<rect") == 2);
  CHECK(count(svg, "<title>tp=2, nodes 64: 4 </title>") == 1);
}

TEST_CASE("svg: a timeline's bars, one <rect> each", "[report][html]") {
  TimelineChart c;
  c.x_label = "seconds";
  c.rows = {"0 compute", "0 other"};
  c.styles = {{"forward", "#1f77b4", true}, {"tensor", "#ff7f0e", true}, {"unused", "#000", true}};
  c.bars = {{0, 0, 1, 0, "f1"}, {0, 2, 3, 0, "f2"}, {1, 1, 1.5, 1, "t <1>"}, {5, 0, 1, 1, "no such row"}};
  const std::string svg = timeline_svg(c);
  CHECK(count(svg, "<rect") == 3 + 2);  // three bars, two swatches (no bar is "unused")
  CHECK(count(svg, "<title>t &lt;1&gt;</title>") == 1);
  CHECK(count(svg, "no such row") == 0);
  CHECK(svg == timeline_svg(c));
}

TEST_CASE("svg: round ticks", "[report][html]") {
  CHECK(nice_ticks(0, 10) == std::vector<double>{0, 2, 4, 6, 8, 10});
  const std::vector<double> tenths = nice_ticks(0, 1);
  REQUIRE(tenths.size() == 6);  // steps of 0.2
  CHECK(tenths[1] == Approx(0.2));
  CHECK(tenths.back() == Approx(1));
  CHECK(nice_ticks(87.5, 91).front() <= 87.5);
  CHECK(nice_ticks(87.5, 91).back() >= 91);
}

TEST_CASE("html: the same input gives the same bytes", "[report][html]") {
  CHECK(bar_svg(two_bars()) == bar_svg(two_bars()));
  const nlohmann::json sweep = {
      {"axes", {{{"key", "nodes"}, {"values", {8, 16}}}, {{"key", "tensor_parallel_degree"}, {"values", {2, 4}}}}},
      {"points",
       {{{"index", 0}, {"ok", true}, {"status", "fits"}, {"values", {{"nodes", 8}, {"tensor_parallel_degree", 2}}},
         {"estimate", {{"samples_per_s", 10.5}, {"step_time_s", 3.0}, {"peak_memory_bytes", 2e10}}},
         {"configuration", "pp2 tp2"}, {"reason", nullptr}, {"cost_on_demand", 1000.0}, {"cost_spot", nullptr},
         {"time_to_train_s", 86400.0}},
        {{"index", 3}, {"ok", false}, {"status", "invalid"}, {"values", {{"nodes", 16}, {"tensor_parallel_degree", 4}}},
         {"estimate", nullptr}, {"configuration", nullptr}, {"reason", "a <bad> point"}, {"cost_on_demand", nullptr},
         {"cost_spot", nullptr}, {"time_to_train_s", nullptr}}}}};
  const std::string page = sweep_html("job & co.yaml", sweep);
  CHECK(page == sweep_html("job & co.yaml", sweep));
  CHECK(count(page, "<svg ") == 4);  // throughput, step time, memory, cost
  CHECK(count(page, "a &lt;bad&gt; point") == 1);
  CHECK(count(page, "nodes=8") > 0);  // a curve per value of the other axis
  CHECK(count(page, "<script") == 0);
}

TEST_CASE("html: the simulate page of a real job, twice alike", "[report][html]") {
  const Job job = load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/gpt-neox-20b-p4d-16.yaml");
  const Estimate e = estimate(job);
  sim::SimResult r;  // a hand-made result: two ranks, one per stage
  r.metrics = e;
  r.stage_utilisation = {0.8, 0.82};
  for (int stage = 0; stage < 2; ++stage) {
    sim::RankResult k;
    k.rank = 8 * stage, k.stage = stage, k.end_time = e.step_time, k.compute_busy = 0.8 * e.step_time;
    k.peak_memory = 12e9;
    r.ranks.push_back(k);
  }
  CHECK(count(simulation_html(job, r, e), "<svg ") == 4);  // step, ranks, memory per stage, utilisation
  // With events, a timeline too: rank 0's two forwards nearly touch (closer than a 2000th
  // of the step) and are one bar; the wait is not drawn.
  r.metrics.step_time = 10;
  const auto event = [](int rank, int stream, OpKind kind, CommGroup group, double start, double end) {
    TraceEvent t;
    t.rank = rank, t.stream = stream, t.kind = kind, t.group = group, t.start = start, t.end = end;
    return t;
  };
  r.events = {event(0, 0, OpKind::forward, CommGroup::none, 0, 1), event(0, 0, OpKind::forward, CommGroup::none, 1.001, 2),
              event(0, 2, OpKind::all_reduce, CommGroup::tensor, 1, 1.5), event(0, 0, OpKind::wait, CommGroup::none, 2, 3),
              event(8, 0, OpKind::backward, CommGroup::none, 3, 4)};
  const std::string page = simulation_html(job, r, e);
  CHECK(page == simulation_html(job, r, e));
  CHECK(count(page, "<svg ") == 5);
  CHECK(count(page, "<title>forward: 0.0 us to 2.000 s (2 instructions)</title>") == 1);
  CHECK(count(page, "<title>tensor-parallel collective: 1.000 s to 1.500 s (1 instruction)</title>") == 1);
  CHECK(count(page, "<title>backward: 3.000 s to 4.000 s (1 instruction)</title>") == 1);
  CHECK(count(page, ">8 compute</text>") == 1);
  CHECK(count(page, "stage 1") > 0);
  CHECK(count(page, "peak over the simulated timeline") == 3);  // legend, and each stage's dash
}
