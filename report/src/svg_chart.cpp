// The --report pages' charts (svg_chart.hpp): one frame of axes, ticks and legend that the
// scatter, bar and line charts draw their marks in.
#include "partune/report/svg_chart.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "partune/report/html_page.hpp"

namespace partune::report {

namespace {

// The picture: the plot's box, then the legend to its right.
constexpr double kLeft = 72, kRight = 560, kTop = 16, kBottom = 280, kLegend = 578, kRow = 18;
constexpr double kWidth = 900;

bool finite(double v) { return std::isfinite(v); }

std::string num(double v) { return fmt::format("{:.1f}", v); }

// A tick's or tooltip's number: 6 significant digits at most, no trailing zeros.
std::string label_number(double v) {
  if (std::fabs(v) < 1e-12) v = 0;
  return fmt::format("{:.6g}", v);
}

// Maps a data interval onto the plot's box.
struct Frame {
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;
  double x(double v) const { return kLeft + (v - x_lo) / (x_hi - x_lo) * (kRight - kLeft); }
  double y(double v) const { return kBottom - (v - y_lo) / (y_hi - y_lo) * (kBottom - kTop); }
};

// [lo, hi] widened to round ticks, never empty.
std::pair<double, double> padded(double lo, double hi, bool from_zero) {
  if (!finite(lo) || !finite(hi)) lo = 0, hi = 1;
  if (from_zero) lo = std::min(lo, 0.0), hi = std::max(hi, 0.0);
  if (hi - lo <= 0) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= pad, hi += pad;
  }
  if (!from_zero) {
    const double pad = 0.05 * (hi - lo);
    lo -= pad, hi += pad;
  }
  const std::vector<double> t = nice_ticks(lo, hi);
  return {std::min(lo, t.front()), std::max(hi, t.back())};
}

std::string text(double x, double y, const std::string& s, const char* anchor = "start", const std::string& extra = "") {
  return fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"{}\"{}>{}</text>\n", num(x), num(y), anchor, extra,
                     html_escape(s));
}

std::string line(double x1, double y1, double x2, double y2, const char* cls) {
  return fmt::format("<line class=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>\n", cls, num(x1), num(y1), num(x2),
                     num(y2));
}

// The y axis: grid lines and labels at round values, and its label turned upright.
std::string y_axis(const Frame& f, const std::string& label) {
  std::string s;
  for (double t : nice_ticks(f.y_lo, f.y_hi)) {
    if (t < f.y_lo || t > f.y_hi) continue;
    s += line(kLeft, f.y(t), kRight, f.y(t), "grid");
    s += text(kLeft - 6, f.y(t) + 4, label_number(t), "end");
  }
  s += line(kLeft, kTop, kLeft, kBottom, "axis");
  const double mid = (kTop + kBottom) / 2;
  return s + text(16, mid, label, "middle", fmt::format(" transform=\"rotate(-90 16 {})\"", num(mid)));
}

// A numeric x axis (the scatter's).
std::string x_axis(const Frame& f, const std::string& label) {
  std::string s;
  for (double t : nice_ticks(f.x_lo, f.x_hi)) {
    if (t < f.x_lo || t > f.x_hi) continue;
    s += line(f.x(t), kTop, f.x(t), kBottom, "grid");
    s += text(f.x(t), kBottom + 16, label_number(t), "middle");
  }
  s += line(kLeft, kBottom, kRight, kBottom, "axis");
  return s + text((kLeft + kRight) / 2, kBottom + 36, label, "middle");
}

// Whether categorical labels are written slanted: when upright ones (about 6 px a
// character) would not fit side by side.
bool slanted(const std::vector<std::string>& labels) {
  std::size_t longest = 0;
  for (const std::string& l : labels) longest = std::max(longest, l.size());
  return static_cast<double>(labels.size() * (6 * longest + 8)) > kRight - kLeft;
}

// A categorical x axis: label i under position x(i); slanted when there are many.
std::string category_axis(const Frame& f, const std::vector<std::string>& labels, const std::string& label) {
  std::string s = line(kLeft, kBottom, kRight, kBottom, "axis");
  const bool slant = slanted(labels);
  // Slanted labels need about 14 px each along the axis: beyond that, every n-th one.
  const auto every = static_cast<std::size_t>(std::ceil(14.0 * static_cast<double>(labels.size()) / (kRight - kLeft)));
  for (std::size_t i = 0; i < labels.size(); i += std::max<std::size_t>(every, 1)) {
    const double x = f.x(static_cast<double>(i)), y = kBottom + 14;
    s += slant ? text(x, y, labels[i], "end", fmt::format(" transform=\"rotate(-35 {} {})\"", num(x), num(y)))
               : text(x, y, labels[i], "middle");
  }
  return s + text((kLeft + kRight) / 2, kBottom + (slant ? 76 : 36), label, "middle");
}

std::string swatch(double x, double y, const MarkStyle& style) {
  return fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\" stroke=\"{}\"/>\n", num(x),
                     num(y), style.filled ? style.color : "none", style.color);
}

// The legend at the right: one swatch and name per entry, then the reference lines' names.
std::string legend(const std::vector<MarkStyle>& entries, const std::vector<ReferenceLine>& lines) {
  std::string s;
  double y = kTop;
  for (const MarkStyle& e : entries) {
    s += swatch(kLegend, y, e) + text(kLegend + 18, y + 10, e.name);
    y += kRow;
  }
  for (const ReferenceLine& l : lines) {
    s += line(kLegend, y + 6, kLegend + 12, y + 6, "ref") + text(kLegend + 18, y + 10, l.name);
    y += kRow;
  }
  return s;
}

// The <svg> element around a chart's body, tall enough for its legend and for what lies
// down to `bottom`.
std::string svg(const std::string& body, std::size_t legend_rows, double bottom) {
  const double height = std::max(bottom, kTop + kRow * static_cast<double>(legend_rows) + 8);
  return fmt::format("<svg width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" role=\"img\">\n{}</svg>\n", num(kWidth),
                     num(height), num(kWidth), num(height), body);
}

// The bottom of a chart whose x labels are slanted or not.
double below_axis(bool slant) { return kBottom + (slant ? 84 : 48); }

// The smallest and largest finite value of `values`.
std::pair<double, double> extent(const std::vector<double>& values) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (double v : values)
    if (finite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  return {lo, hi};
}

// A categorical frame: position i of n in the middle of its slot.
Frame category_frame(std::size_t n, std::pair<double, double> y) {
  Frame f;
  f.x_lo = -0.5, f.x_hi = static_cast<double>(std::max<std::size_t>(n, 1)) - 0.5;
  std::tie(f.y_lo, f.y_hi) = y;
  return f;
}

std::string scatter_mark(const Frame& f, const ScatterChart& c, const ScatterMark& m) {
  const MarkStyle& style = c.styles.at(m.style);
  const double r = std::min(12.0, 4 + 2 * std::sqrt(static_cast<double>(m.count - 1)));
  const double x = f.x(m.x), y = f.y(m.y);
  std::string s = fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"{}\" fill-opacity=\"0.75\" stroke=\"{}\">"
                              "<title>{}</title></circle>\n",
                              num(x), num(y), num(r), style.filled ? style.color : "none", style.color,
                              html_escape(m.tooltip));
  if (m.count > 1) s += text(x + r + 2, y + 4, fmt::format("x{}", m.count));
  if (m.highlighted) {
    s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" fill=\"none\" stroke=\"#000\" stroke-width=\"2\"/>\n",
                     num(x), num(y), num(r + 4));
    s += text(x, y - r - 8, m.label, "middle", " font-weight=\"bold\"");
  }
  return s;
}

}  // namespace

const std::string& palette(std::size_t i) {
  static const std::vector<std::string> colors = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                                  "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
                                                  "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"};
  return colors[i % colors.size()];
}

std::vector<double> nice_ticks(double lo, double hi, int count) {
  if (!finite(lo) || !finite(hi) || hi <= lo || count < 1) return {finite(lo) ? lo : 0};
  const double raw = (hi - lo) / count, power = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / power < 1.5 ? power : raw / power < 3.5 ? 2 * power : raw / power < 7.5 ? 5 * power : 10 * power;
  std::vector<double> ticks;
  for (double k = std::floor(lo / step); k * step <= hi + step * 1e-9 || ticks.empty(); k += 1) ticks.push_back(k * step);
  if (ticks.back() < hi - step * 1e-9) ticks.push_back(ticks.back() + step);
  return ticks;
}

std::string scatter_svg(const ScatterChart& c) {
  std::vector<double> xs, ys;
  for (const ScatterMark& m : c.marks)
    if (finite(m.x) && finite(m.y)) xs.push_back(m.x), ys.push_back(m.y);
  for (const ReferenceLine& l : c.x_lines) xs.push_back(l.at);
  Frame f;
  std::tie(f.x_lo, f.x_hi) = padded(extent(xs).first, extent(xs).second, false);
  std::tie(f.y_lo, f.y_hi) = padded(extent(ys).first, extent(ys).second, false);
  std::string body = y_axis(f, c.y_label) + x_axis(f, c.x_label);
  for (const ReferenceLine& l : c.x_lines)
    if (finite(l.at)) body += line(f.x(l.at), kTop, f.x(l.at), kBottom, "ref");
  for (const ScatterMark& m : c.marks)
    if (finite(m.x) && finite(m.y) && !m.highlighted) body += scatter_mark(f, c, m);
  for (const ScatterMark& m : c.marks)  // on top of the others
    if (finite(m.x) && finite(m.y) && m.highlighted) body += scatter_mark(f, c, m);
  std::vector<MarkStyle> entries;  // the styles some mark has
  for (std::size_t k = 0; k < c.styles.size(); ++k)
    if (std::any_of(c.marks.begin(), c.marks.end(), [k](const ScatterMark& m) { return m.style == k; }))
      entries.push_back(c.styles[k]);
  return svg(body + legend(entries, c.x_lines), entries.size() + c.x_lines.size(), below_axis(false));
}

std::string bar_svg(const BarChart& c) {
  std::vector<double> tops;
  for (const auto& parts : c.values) {
    double sum = 0;
    for (double v : parts) sum += finite(v) && v > 0 ? v : 0;
    tops.push_back(sum);
  }
  for (const ReferenceLine& l : c.lines) tops.push_back(l.at);
  tops.insert(tops.end(), c.marks.begin(), c.marks.end());
  const Frame f = category_frame(c.categories.size(), padded(0, extent(tops).second, true));
  std::string body = y_axis(f, c.y_label) + category_axis(f, c.categories, "");
  const double width = std::min(60.0, 0.6 * (kRight - kLeft) / static_cast<double>(std::max<std::size_t>(c.categories.size(), 1)));
  for (std::size_t i = 0; i < c.categories.size() && i < c.values.size(); ++i) {
    const double x = f.x(static_cast<double>(i)) - width / 2;
    double base = 0;
    for (std::size_t k = 0; k < c.layers.size() && k < c.values[i].size(); ++k) {
      const double v = c.values[i][k];
      if (!finite(v) || v <= 0) continue;
      body += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {}: {} {}</title>"
                          "</rect>\n",
                          num(x), num(f.y(base + v)), num(width), num(f.y(base) - f.y(base + v)), c.layers[k].color,
                          html_escape(c.categories[i]), html_escape(c.layers[k].name), label_number(v),
                          html_escape(c.unit));
      base += v;
    }
    if (i < c.marks.size() && finite(c.marks[i]))
      body += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#000\" stroke-width=\"3\"><title>{}: "
                          "{} {}</title></line>\n",
                          num(x - 4), num(f.y(c.marks[i])), num(x + width + 4), num(f.y(c.marks[i])),
                          html_escape(c.marks_name), label_number(c.marks[i]), html_escape(c.unit));
  }
  for (const ReferenceLine& l : c.lines) body += line(kLeft, f.y(l.at), kRight, f.y(l.at), "ref");
  std::vector<MarkStyle> entries;  // the parts drawn somewhere
  for (std::size_t k = 0; k < c.layers.size(); ++k)
    if (std::any_of(c.values.begin(), c.values.end(),
                    [k](const std::vector<double>& v) { return k < v.size() && finite(v[k]) && v[k] > 0; }))
      entries.push_back(c.layers[k]);
  if (!c.marks_name.empty()) entries.push_back({c.marks_name, "#000", true});
  return svg(body + legend(entries, c.lines), entries.size() + c.lines.size(), below_axis(slanted(c.categories)));
}

std::string line_svg(const LineChart& c) {
  std::vector<double> ys;
  for (const LineSeries& s : c.series) ys.insert(ys.end(), s.y.begin(), s.y.end());
  for (const ReferenceLine& l : c.lines) ys.push_back(l.at);
  const Frame f = category_frame(c.x_labels.size(), padded(0, extent(ys).second, true));
  std::string body = y_axis(f, c.y_label) + category_axis(f, c.x_labels, c.x_label);
  std::vector<MarkStyle> entries;
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const LineSeries& s = c.series[k];
    const std::string& color = palette(k);
    entries.push_back({s.name, color, true});
    std::string points, dots;
    int n = 0;
    const auto end_run = [&] {  // a run of two points or more is a line
      if (n > 1)
        body += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n", points, color);
      points.clear(), n = 0;
    };
    for (std::size_t i = 0; i < s.y.size() && i < c.x_labels.size(); ++i) {
      if (!finite(s.y[i])) {
        end_run();
        continue;
      }
      const double x = f.x(static_cast<double>(i)), y = f.y(s.y[i]);
      points += fmt::format("{}{},{}", n++ ? " " : "", num(x), num(y));
      dots += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{}\"><title>{}, {} {}: {} {}</title></circle>\n",
                          num(x), num(y), color, html_escape(s.name), html_escape(c.x_label), html_escape(c.x_labels[i]),
                          label_number(s.y[i]), html_escape(c.unit));
    }
    end_run();
    body += dots;
  }
  for (const ReferenceLine& l : c.lines) body += line(kLeft, f.y(l.at), kRight, f.y(l.at), "ref");
  return svg(body + legend(entries, c.lines), entries.size() + c.lines.size(), below_axis(slanted(c.x_labels)));
}

std::string timeline_svg(const TimelineChart& c) {
  constexpr double kLane = 12;
  std::vector<double> ends = {0};
  for (const TimelineBar& b : c.bars) ends.push_back(b.end);
  Frame f;
  f.x_lo = 0, f.x_hi = std::max(extent(ends).second, 1e-9);
  f.x_hi = nice_ticks(0, f.x_hi).back();
  const double bottom = kTop + kLane * static_cast<double>(c.rows.size());
  std::string body;
  for (double t : nice_ticks(f.x_lo, f.x_hi)) {
    body += line(f.x(t), kTop, f.x(t), bottom, "grid");
    body += text(f.x(t), bottom + 16, label_number(t), "middle");
  }
  body += line(kLeft, bottom, kRight, bottom, "axis") + text((kLeft + kRight) / 2, bottom + 36, c.x_label, "middle");
  for (std::size_t r = 0; r < c.rows.size(); ++r)
    body += text(kLeft - 6, kTop + kLane * static_cast<double>(r) + 9, c.rows[r], "end", " font-size=\"9\"");
  std::vector<bool> used(c.styles.size(), false);
  for (const TimelineBar& b : c.bars) {
    if (!finite(b.start) || !finite(b.end) || b.row >= c.rows.size()) continue;
    used.at(b.style) = true;
    body += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}</title></rect>\n",
                        num(f.x(b.start)), num(kTop + kLane * static_cast<double>(b.row) + 1),
                        num(std::max(0.3, f.x(b.end) - f.x(b.start))), num(kLane - 2), c.styles[b.style].color,
                        html_escape(b.tooltip));
  }
  std::vector<MarkStyle> entries;
  for (std::size_t k = 0; k < c.styles.size(); ++k)
    if (used[k]) entries.push_back(c.styles[k]);
  return svg(body + legend(entries, {}), entries.size(), bottom + 48);
}

}  // namespace partune::report
