#pragma once
#include <stdexcept>
#include <string>

namespace partune {

// A scenario file (or a value inside one) that cannot be used. Always names the file,
// the key (dotted path, e.g. "parallel.tensor_parallel_degree") and the reason, so the
// CLI can print one line a user can act on.
class ScenarioError : public std::runtime_error {
 public:
  ScenarioError(std::string file, std::string key, std::string reason)
      : std::runtime_error(file + ": " + (key.empty() ? "" : key + ": ") + reason),
        file_(std::move(file)), key_(std::move(key)), reason_(std::move(reason)) {}
  const std::string& file() const { return file_; }
  const std::string& key() const { return key_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string file_, key_, reason_;
};

}  // namespace partune
