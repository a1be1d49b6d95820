// The sweep's --report page (html_report.hpp), drawn from the sweep's --json object.
#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "partune/costmodel/units.hpp"
#include "partune/report/html_page.hpp"
#include "partune/report/html_report.hpp"
#include "partune/report/svg_chart.hpp"

namespace partune::report {

namespace {

using json = nlohmann::json;
constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

// A value as the table and the axis show it: a string without its quotes.
std::string shown(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

double number(const json& v) { return v.is_number() ? v.get<double>() : kNone; }

// `key` of a point's estimate (NaN when there is none, or the point does not fit and
// `only_fitting`).
double estimate_value(const json& p, const char* key, bool only_fitting) {
  if (p["estimate"].is_null() || (only_fitting && !p["ok"].get<bool>())) return kNone;
  return number(p["estimate"][key]);
}

// The curves: x is the last axis, one series per combination of the others (the points
// come in product order, the last axis fastest).
struct Curves {
  std::vector<std::string> x_labels;
  std::string x_key;
  std::vector<std::string> series;  // names
  std::size_t width = 1;            // values of the last axis
};

Curves curves_of(const std::string& origin, const json& sweep) {
  Curves c;
  const json& axes = sweep["axes"];
  const json& last = axes.back();
  c.x_key = last["key"].get<std::string>();
  for (const json& v : last["values"]) c.x_labels.push_back(shown(v));
  c.width = std::max<std::size_t>(c.x_labels.size(), 1);
  const std::size_t count = sweep["points"].empty() ? 0 : (sweep["points"].back()["index"].get<std::size_t>() / c.width + 1);
  for (std::size_t s = 0; s < count; ++s) {
    // The other axes' values of series s: its first point's.
    std::string name;
    std::size_t rest = s;
    for (std::size_t a = axes.size() - 1; a-- > 0;) {
      const json& values = axes[a]["values"];
      name = fmt::format("{}={}", axes[a]["key"].get<std::string>(), shown(values[rest % values.size()])) +
             (name.empty() ? "" : ", " + name);
      rest /= values.size();
    }
    c.series.push_back(name.empty() ? std::filesystem::path(origin).filename().string() : name);  // one axis: the job
  }
  return c;
}

// One chart of `value` of each point against the last axis.
template <typename Value>
LineChart chart(const Curves& c, const json& points, const std::string& y_label, const std::string& unit, Value value,
                const std::string& suffix = "") {
  LineChart chart;
  chart.x_label = c.x_key;
  chart.y_label = y_label;
  chart.unit = unit;
  chart.x_labels = c.x_labels;
  for (const std::string& name : c.series) chart.series.push_back({name + suffix, std::vector<double>(c.width, kNone)});
  for (const json& p : points) {
    const std::size_t i = p["index"].get<std::size_t>();
    if (i / c.width < chart.series.size()) chart.series[i / c.width].y[i % c.width] = value(p);
  }
  return chart;
}

bool any_number(const json& points, const char* key) {
  for (const json& p : points)
    if (p[key].is_number()) return true;
  return false;
}

// Cost on demand and on spot where priced; else time-to-train; else nothing to draw.
void cost_section(HtmlPage& page, const Curves& c, const json& points) {
  page.heading("Cost");
  if (any_number(points, "cost_on_demand") || any_number(points, "cost_spot")) {
    LineChart cost = chart(c, points, "USD to train", "USD", [](const json& p) { return number(p["cost_on_demand"]); },
                           " (on demand)");
    const LineChart spot = chart(c, points, "", "", [](const json& p) { return number(p["cost_spot"]); }, " (spot)");
    if (any_number(points, "cost_spot")) cost.series.insert(cost.series.end(), spot.series.begin(), spot.series.end());
    page.figure(line_svg(cost), "The token budget's cost at each point that fits (--tokens and the prices).");
  } else if (any_number(points, "time_to_train_s")) {
    page.figure(line_svg(chart(c, points, "days to train", "days",
                               [](const json& p) { return number(p["time_to_train_s"]) / 86400; })),
                "No price is known: the token budget's time-to-train instead.");
  } else {
    page.paragraph("No cost: give --tokens (and --price-per-node-hour where the instance type has no price:) to "
                   "price each point.");
  }
}

void point_table(HtmlPage& page, const json& sweep) {
  std::vector<std::string> header;
  for (const json& a : sweep["axes"]) header.push_back(a["key"].get<std::string>());
  for (const char* h : {"status", "samples/s", "step", "memory", "cost", "configuration or reason"}) header.push_back(h);
  std::vector<std::vector<std::string>> rows;
  for (const json& p : sweep["points"]) {
    std::vector<std::string> row;
    for (const json& a : sweep["axes"]) row.push_back(shown(p["values"][a["key"].get<std::string>()]));
    const auto cell = [&](double v, const char* format) { return std::isnan(v) ? std::string() : fmt::format(fmt::runtime(format), v); };
    row.push_back(p["status"].get<std::string>());
    row.push_back(cell(estimate_value(p, "samples_per_s", true), "{:.2f}"));
    row.push_back(cell(estimate_value(p, "step_time_s", true), "{:.4g} s"));
    row.push_back(cell(estimate_value(p, "peak_memory_bytes", false) / units::GiB, "{:.2f} GiB"));
    row.push_back(cell(number(p["cost_on_demand"]), "${:.0f}"));
    row.push_back(p["ok"].get<bool>() ? shown(p["configuration"]) : shown(p["reason"]));
    rows.push_back(row);
  }
  page.table(header, rows);
}

}  // namespace

std::string sweep_html(const std::string& origin, const nlohmann::json& sweep) {
  HtmlPage page("partune sweep: " + origin);
  const json& points = sweep["points"];
  const Curves c = curves_of(origin, sweep);
  long fitting = 0;
  for (const json& p : points) fitting += p["ok"].get<bool>() ? 1 : 0;
  page.paragraph(fmt::format("{} points, {} of them fit; curves against {}, one per combination of the other axes. "
                             "A point that does not fit has no throughput (a gap in the curve).",
                             points.size(), fitting, c.x_key));
  page.heading("Throughput");
  page.figure(line_svg(chart(c, points, "samples/s", "samples/s",
                             [](const json& p) { return estimate_value(p, "samples_per_s", true); })), "");
  page.heading("Step time");
  page.figure(line_svg(chart(c, points, "seconds per step", "s",
                             [](const json& p) { return estimate_value(p, "step_time_s", true); })), "");
  page.heading("Memory per GPU");
  page.figure(line_svg(chart(c, points, "GiB (largest stage)", "GiB",
                             [](const json& p) { return estimate_value(p, "peak_memory_bytes", false) / units::GiB; })),
              "Every point with an estimate, those that do not fit too.");
  cost_section(page, c, points);
  page.heading("Points");
  point_table(page, sweep);
  return page.str();
}

}  // namespace partune::report
