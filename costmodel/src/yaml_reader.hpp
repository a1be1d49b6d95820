#pragma once
// Private helper for scenario.cpp and table.cpp: typed, key-checked access to a YAML
// mapping, so every error names the file, the dotted key path and the reason.
#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "partune/costmodel/error.hpp"

namespace partune::detail {

class Reader {
 public:
  Reader(YAML::Node node, std::string file, std::string path)
      : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)) {}

  const YAML::Node& node() const { return node_; }
  const std::string& file() const { return file_; }
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  [[noreturn]] void fail(const std::string& key, const std::string& reason) const {
    throw ScenarioError(file_, key_path(key), reason);
  }
  void require_map() const;
  // Rejects keys outside `allowed` (typos must not be silently ignored).
  void allow_only(std::initializer_list<const char*> allowed) const;
  bool has(const std::string& key) const { return node_[key].IsDefined() && !node_[key].IsNull(); }
  Reader child(const std::string& key) const;

  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  double get_double(const std::string& key) const;
  double get_double(const std::string& key, double fallback) const;
  double get_positive(const std::string& key) const;
  double get_positive(const std::string& key, double fallback) const;
  double get_fraction(const std::string& key, double fallback) const;  // in (0, 1]
  double get_non_negative(const std::string& key, double fallback) const;
  int get_int(const std::string& key) const;
  int get_int(const std::string& key, int fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  // A YAML sequence of integers ([10, 14]); the fallback when absent or null.
  std::vector<int> get_int_list(const std::string& key, std::vector<int> fallback) const;
  // One of `choices`; returns its index.
  int get_choice(const std::string& key, std::initializer_list<const char*> choices, int fallback) const;

 private:
  YAML::Node node_;
  std::string file_, path_;
};

// YAML merge keys (`<<: *anchor`), which yaml-cpp parses but does not apply: the
// anchored mapping is deep-merged under the mapping's own keys. A key given twice in one
// mapping is a ScenarioError naming `file` and the key's path.
YAML::Node expand_merge_keys(const YAML::Node& node, const std::string& file, const std::string& path);
// Loads a YAML file (merge keys applied); ScenarioError if it cannot be read or parsed.
YAML::Node load_yaml_file(const std::string& file);
// Recursive merge: keys of `over` replace or extend those of `base` (maps merge deeply).
YAML::Node deep_merge(const YAML::Node& base, const YAML::Node& over);
std::string dirname_of(const std::string& file);
std::string resolve_path(const std::string& relative_to_file, const std::string& path);

}  // namespace partune::detail
