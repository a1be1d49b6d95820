#include "partune/validate/job_suite.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace partune::validate {

namespace fs = std::filesystem;

std::vector<std::string> suite_files(const std::string& suite, const std::string& jobs) {
  if (!fs::is_directory(suite))
    throw std::runtime_error(fmt::format("--suite {}: not a directory", suite));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(suite)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".yaml" || ext == ".yml")) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  if (!jobs.empty()) {
    std::vector<std::string> wanted, kept;
    std::stringstream ss(jobs);
    for (std::string w; std::getline(ss, w, ',');)
      if (!w.empty()) wanted.push_back(w);
    for (const std::string& w : wanted) {
      const auto it = std::find_if(files.begin(), files.end(),
                                   [&](const std::string& f) { return fs::path(f).stem().string() == w; });
      if (it == files.end()) throw std::runtime_error(fmt::format("--jobs: no job file {}.yaml in {}", w, suite));
      kept.push_back(*it);
    }
    files = kept;
  }
  if (files.empty()) throw std::runtime_error(fmt::format("--suite {}: no *.yaml job files there", suite));
  return files;
}

}  // namespace partune::validate
