// --report FILE.html at the edge (report_file.hpp).
#include "report_file.hpp"

#include <iostream>

namespace partune::cli {

void add_report_option(CLI::App* cmd, std::string* path) {
  cmd->add_option("--report", *path,
                  "also write one self-contained HTML page of pictures (inline SVG, no script), e.g. report.html");
}

std::optional<AtomicFile> open_report(const std::string& path) {
  if (path.empty()) return std::nullopt;
  return std::optional<AtomicFile>(std::in_place, path);
}

void write_report(std::optional<AtomicFile>& file, const std::function<std::string()>& page) {
  if (!file) return;
  file->write(page());
  file->commit();
  std::cerr << "wrote report " << file->path() << "\n";
}

}  // namespace partune::cli
