#pragma once
// A suite of job files: every *.yaml (or *.yml) in a directory, sorted by name.
#include <string>
#include <vector>

namespace partune::validate {

// `jobs`: empty, or the comma-separated names (without .yaml) to keep, in that order.
// Throws std::runtime_error naming the directory or the missing job.
std::vector<std::string> suite_files(const std::string& suite, const std::string& jobs);

}  // namespace partune::validate
