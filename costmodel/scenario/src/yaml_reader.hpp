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
  // Numbers are finite and within a range stated in docs/scenarios.md; the message
  // gives the range. kMaxQuantity bounds every physical quantity read in its file's unit
  // (GiB, GB/s, TFLOP/s, us), so that no product of them reaches infinity.
  static constexpr double kMaxQuantity = 1e9;
  double get_double(const std::string& key) const;
  double get_double(const std::string& key, double fallback) const;
  // In [lo, hi].
  double get_in_range(const std::string& key, double lo, double hi) const;
  double get_in_range(const std::string& key, double lo, double hi, double fallback) const;
  // In (0, kMaxQuantity].
  double get_positive(const std::string& key) const;
  double get_positive(const std::string& key, double fallback) const;
  double get_fraction(const std::string& key, double fallback) const;  // in (0, 1]
  // In [0, kMaxQuantity].
  double get_non_negative(const std::string& key, double fallback) const;
  // An integer in [lo, hi].
  int get_int(const std::string& key, long long lo, long long hi) const;
  int get_int(const std::string& key, long long lo, long long hi, int fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  // A YAML sequence of integers ([10, 14]); the fallback when absent or null.
  // Each entry in [lo, hi], at most max_entries of them.
  std::vector<int> get_int_list(const std::string& key, long long lo, long long hi, std::size_t max_entries) const;
  // One of `choices`; returns its index.
  int get_choice(const std::string& key, std::initializer_list<const char*> choices, int fallback) const;

 private:
  YAML::Node node_;
  std::string file_, path_;
};

// YAML merge keys (`<<: *anchor`), which yaml-cpp parses but does not apply: the
// anchored mapping is deep-merged under the mapping's own keys. A key given twice in one
// mapping is a ScenarioError naming `file` and the key's path.
// Expansion copies aliases into a tree: a node that contains itself (through an alias or
// a merge key) is refused, and so is a document that expands to more than
// kMaxExpandedNodes values or nests deeper than kMaxNestingDepth.
constexpr std::size_t kMaxExpandedNodes = 20000;
constexpr std::size_t kMaxNestingDepth = 64;
constexpr std::size_t kMaxFileBytes = std::size_t{16} << 20;
YAML::Node expand_merge_keys(const YAML::Node& node, const std::string& file, const std::string& path);
// Parses YAML text and expands it; ScenarioError naming `file` if it is not valid YAML.
YAML::Node parse_yaml_text(const std::string& text, const std::string& file);
// Loads a YAML file (merge keys applied); ScenarioError if it is a directory or cannot be
// read or parsed.
YAML::Node load_yaml_file(const std::string& file);
// Recursive merge: keys of `over` replace or extend those of `base` (maps merge deeply).
YAML::Node deep_merge(const YAML::Node& base, const YAML::Node& over);
std::string dirname_of(const std::string& file);
std::string resolve_path(const std::string& relative_to_file, const std::string& path);

}  // namespace partune::detail
