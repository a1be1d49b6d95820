// The --report pages' skeleton and escaping (html_page.hpp).
#include "partune/report/html_page.hpp"

#include <cctype>

namespace partune::report {

namespace {

// Inline: the page must open with nothing beside it.
constexpr const char* kStyle = R"(body{font-family:sans-serif;margin:1.5em auto;max-width:1000px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}
figure{margin:0.8em 0}figcaption{font-size:0.85em;color:#555}
table{border-collapse:collapse;font-size:0.85em}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
td.n{text-align:right;white-space:nowrap;font-variant-numeric:tabular-nums}
svg text{font-family:sans-serif;font-size:11px;fill:#222}svg .axis{stroke:#444}svg .grid{stroke:#e4e4e4}
svg .ref{stroke:#c00;stroke-dasharray:4 3}
)";

// A cell the style sheet right-aligns: a number, maybe signed, with a unit after it.
bool numeric(const std::string& cell) {
  std::size_t i = 0;
  if (i < cell.size() && (cell[i] == '-' || cell[i] == '+' || cell[i] == '$')) ++i;
  return i < cell.size() && std::isdigit(static_cast<unsigned char>(cell[i]));
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

HtmlPage::HtmlPage(std::string title) : title_(std::move(title)) {}

void HtmlPage::heading(const std::string& text) { body_ += "<h2>" + html_escape(text) + "</h2>\n"; }

void HtmlPage::paragraph(const std::string& text) { body_ += "<p>" + html_escape(text) + "</p>\n"; }

void HtmlPage::preformatted(const std::string& text) { body_ += "<pre>" + html_escape(text) + "</pre>\n"; }

void HtmlPage::figure(const std::string& svg, const std::string& caption) {
  body_ += "<figure>\n" + svg;
  if (!caption.empty()) body_ += "<figcaption>" + html_escape(caption) + "</figcaption>\n";
  body_ += "</figure>\n";
}

void HtmlPage::table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  body_ += "<table>\n<tr>";
  for (const std::string& h : header) body_ += "<th>" + html_escape(h) + "</th>";
  body_ += "</tr>\n";
  for (const auto& row : rows) {
    body_ += "<tr>";
    for (const std::string& cell : row)
      body_ += (numeric(cell) ? "<td class=\"n\">" : "<td>") + html_escape(cell) + "</td>";
    body_ += "</tr>\n";
  }
  body_ += "</table>\n";
}

std::string HtmlPage::str() const {
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>" + html_escape(title_) +
         "</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n<h1>" + html_escape(title_) + "</h1>\n" + body_ +
         "</body>\n</html>\n";
}

}  // namespace partune::report
