#pragma once
// --report FILE.html (search, sweep, simulate): one self-contained page of pictures
// (report/'s html_report.hpp). The file is opened before the work, so a bad path fails
// first (one line, status 2), and replaced whole once the page is written (AtomicFile);
// "wrote report FILE" goes to standard error, leaving standard output as it was.
#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "partune/costmodel/atomic_file.hpp"
#include "partune/report/html_report.hpp"

namespace partune::cli {

void add_report_option(CLI::App* cmd, std::string* path);
// The page's file, or none when `path` is empty.
std::optional<AtomicFile> open_report(const std::string& path);
// Writes `page()` (called only when there is a file) and commits it.
void write_report(std::optional<AtomicFile>& file, const std::function<std::string()>& page);

}  // namespace partune::cli
