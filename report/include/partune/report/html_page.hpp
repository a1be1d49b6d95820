#pragma once
// One self-contained HTML page (the --report pages of search, sweep and simulate): a
// title, headings, paragraphs, tables and inline SVG, with its style sheet inline. No
// script and no address outside the page: it opens offline, and the same content gives
// the same bytes.
#include <string>
#include <vector>

namespace partune::report {

// `text` safe inside an element or a quoted attribute: & < > " ' as entities.
std::string html_escape(const std::string& text);

class HtmlPage {
 public:
  explicit HtmlPage(std::string title);
  void heading(const std::string& text);    // an <h2>
  void paragraph(const std::string& text);  // a <p>, escaped
  void preformatted(const std::string& text);  // a <pre>, escaped: a text report's lines
  // A figure: `svg` (svg_chart.hpp, already markup) with an escaped caption under it.
  void figure(const std::string& svg, const std::string& caption);
  // A table of escaped cells; numeric-looking cells are right-aligned by the style sheet.
  void table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
  // The whole document, <!DOCTYPE html> to </html>.
  std::string str() const;

 private:
  std::string title_;
  std::string body_;
};

}  // namespace partune::report
