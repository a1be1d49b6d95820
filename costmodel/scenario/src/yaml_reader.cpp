#include "yaml_reader.hpp"

#include "partune/costmodel/nearest_name.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace partune::detail {

void Reader::require_map() const {
  if (!node_.IsMap()) throw ScenarioError(file_, path_, "expected a mapping of keys to values");
}

void Reader::allow_only(std::initializer_list<const char*> allowed) const {
  require_map();
  for (const auto& kv : node_) {
    const std::string k = kv.first.as<std::string>();
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      const std::string near = nearest_name(k, allowed);
      fail(k, "unknown key" + (near.empty() ? std::string() : "; did you mean '" + near + "'?") +
                  " (allowed here: " + list + ")");
    }
  }
}

Reader Reader::child(const std::string& key) const {
  if (!has(key)) fail(key, "missing");
  Reader r(node_[key], file_, key_path(key));
  r.require_map();
  return r;
}

std::string Reader::get_string(const std::string& key) const {
  if (!has(key)) fail(key, "missing");
  const YAML::Node n = node_[key];
  if (!n.IsScalar()) fail(key, "expected a string");
  return n.as<std::string>();
}

std::string Reader::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

double Reader::get_double(const std::string& key) const {
  if (!has(key)) fail(key, "missing");
  const YAML::Node n = node_[key];
  double v = 0;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v) || !std::isfinite(v))
    fail(key, "expected a number, got '" + (n.IsScalar() ? n.Scalar() : std::string("a collection")) + "'");
  return v;
}

double Reader::get_double(const std::string& key, double fallback) const {
  return has(key) ? get_double(key) : fallback;
}

namespace {
std::string number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
}  // namespace

double Reader::get_in_range(const std::string& key, double lo, double hi) const {
  const double v = get_double(key);
  if (v < lo || v > hi)
    fail(key, "must be in [" + number(lo) + ", " + number(hi) + "], got " + node_[key].Scalar());
  return v;
}

double Reader::get_in_range(const std::string& key, double lo, double hi, double fallback) const {
  return has(key) ? get_in_range(key, lo, hi) : fallback;
}

double Reader::get_positive(const std::string& key) const {
  const double v = get_double(key);
  if (v <= 0 || v > kMaxQuantity)
    fail(key, "must be in (0, " + number(kMaxQuantity) + "], got " + node_[key].Scalar());
  return v;
}

double Reader::get_positive(const std::string& key, double fallback) const {
  return has(key) ? get_positive(key) : fallback;
}

double Reader::get_non_negative(const std::string& key, double fallback) const {
  return has(key) ? get_in_range(key, 0, kMaxQuantity) : fallback;
}

double Reader::get_fraction(const std::string& key, double fallback) const {
  if (!has(key)) return fallback;
  const double v = get_double(key);
  if (v <= 0 || v > 1) fail(key, "must be in (0, 1], got " + node_[key].Scalar());
  return v;
}

int Reader::get_int(const std::string& key, long long lo, long long hi) const {
  if (!has(key)) fail(key, "missing");
  const YAML::Node n = node_[key];
  long long v = 0;
  if (!n.IsScalar() || !YAML::convert<long long>::decode(n, v))
    fail(key, "expected an integer, got '" + (n.IsScalar() ? n.Scalar() : std::string("a collection")) + "'");
  if (v < lo || v > hi)
    fail(key, "must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + n.Scalar());
  return static_cast<int>(v);
}

int Reader::get_int(const std::string& key, long long lo, long long hi, int fallback) const {
  return has(key) ? get_int(key, lo, hi) : fallback;
}

bool Reader::get_bool(const std::string& key, bool fallback) const {
  if (!has(key)) return fallback;
  const YAML::Node n = node_[key];
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v))
    fail(key, "expected true or false, got '" + (n.IsScalar() ? n.Scalar() : std::string("a collection")) + "'");
  return v;
}

std::vector<int> Reader::get_int_list(const std::string& key, long long lo, long long hi,
                                      std::size_t max_entries) const {
  if (!has(key)) return {};
  const YAML::Node n = node_[key];
  if (!n.IsSequence())
    fail(key, "expected a list of integers such as [10, 14], got '" +
                  (n.IsScalar() ? n.Scalar() : std::string("a mapping")) + "'");
  if (n.size() > max_entries) fail(key, "more than " + std::to_string(max_entries) + " entries");
  std::vector<int> out;
  for (std::size_t i = 0; i < n.size(); ++i) {
    long long v = 0;
    if (!n[i].IsScalar() || !YAML::convert<long long>::decode(n[i], v) || v < lo || v > hi)
      fail(key, "entry " + std::to_string(i) + ": expected an integer in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "], got '" + (n[i].IsScalar() ? n[i].Scalar() : std::string("a collection")) +
                    "'");
    out.push_back(static_cast<int>(v));
  }
  return out;
}

int Reader::get_choice(const std::string& key, std::initializer_list<const char*> choices,
                       int fallback) const {
  if (!has(key)) return fallback;
  const std::string v = get_string(key);
  int i = 0;
  std::string list;
  for (const char* c : choices) {
    if (v == c) return i;
    list += (list.empty() ? "" : ", ") + std::string(c);
    ++i;
  }
  fail(key, "'" + v + "' is not one of: " + list);
}

namespace {

// Aliases make a YAML document a graph: an alias inside the node it names is a cycle, and
// aliases of aliases fan out exponentially. Before expansion copies the graph into a
// tree, measure() walks it without copying: it refuses a node inside itself, nesting
// deeper than kMaxNestingDepth, and more than kMaxExpandedNodes values in all.
struct Measure {
  const std::string& file;
  std::vector<YAML::Node> open;  // the collections being walked, outermost first
  std::size_t nodes = 0;

  [[noreturn]] void fail(const std::string& path, const std::string& reason) const {
    throw ScenarioError(file, path, reason);
  }
  void walk(const YAML::Node& node, const std::string& path) {
    if (++nodes > kMaxExpandedNodes)
      fail(path, "the document expands to more than " + std::to_string(kMaxExpandedNodes) +
                     " values (aliases that repeat aliases): refused");
    if (!node.IsSequence() && !node.IsMap()) return;
    if (open.size() >= kMaxNestingDepth)
      fail(path, "nested more than " + std::to_string(kMaxNestingDepth) + " levels deep: refused");
    for (const YAML::Node& o : open)
      if (o.is(node))
        fail(path, "an alias or merge key refers to a mapping or list that contains it (a cycle): refused");
    open.push_back(node);
    std::size_t i = 0;
    for (const auto& item : node) {
      if (node.IsSequence()) {
        walk(item, path + "[" + std::to_string(i++) + "]");
        continue;
      }
      if (!item.first.IsScalar()) fail(path, "a key must be a plain name, not a list or mapping");
      const std::string& k = item.first.Scalar();
      walk(item.second, k == "<<" ? path : path.empty() ? k : path + "." + k);
    }
    open.pop_back();
  }
};

// Copies a measured (finite, acyclic) document into a tree with merge keys applied.
// Every node of the copy is new, scalars too: a node of the parsed document carries the
// whole document's memory with it, and yaml-cpp merges that into every list it is pushed
// on, which made a 1 KB file of aliases take seconds.
YAML::Node expand(const YAML::Node& node, const std::string& file, const std::string& path) {
  if (node.IsSequence()) {
    YAML::Node out(YAML::NodeType::Sequence);
    std::size_t i = 0;
    for (const auto& item : node) out.push_back(expand(item, file, path + "[" + std::to_string(i++) + "]"));
    return out;
  }
  if (node.IsScalar()) {
    YAML::Node out(node.Scalar());
    out.SetTag(node.Tag());
    return out;
  }
  if (!node.IsMap()) return YAML::Node(node.Type());
  YAML::Node own(YAML::NodeType::Map);
  YAML::Node merged;
  bool has_merge = false;
  std::set<std::string> keys;
  for (const auto& kv : node) {
    const std::string k = kv.first.as<std::string>();
    const std::string key_path = path.empty() ? k : path + "." + k;
    // YAML requires unique keys; yaml-cpp keeps both, and which one wins would depend on
    // who reads the node.
    if (!keys.insert(k).second)
      throw ScenarioError(file, key_path, "given twice in the same mapping");
    if (k == "<<") merged = expand(kv.second, file, path), has_merge = true;
    else own.force_insert(k, expand(kv.second, file, key_path));  // unique: no linear lookup
  }
  return has_merge ? deep_merge(merged, own) : own;
}

}  // namespace

YAML::Node expand_merge_keys(const YAML::Node& node, const std::string& file, const std::string& path) {
  Measure m{file, {}, 0};
  m.walk(node, path);
  return expand(node, file, path);
}

YAML::Node parse_yaml_text(const std::string& text, const std::string& file) {
  try {
    return expand_merge_keys(YAML::Load(text), file, "");
  } catch (const YAML::Exception& e) {
    throw ScenarioError(file, "", "invalid YAML at line " + std::to_string(e.mark.line + 1) + ": " + e.msg);
  }
}

YAML::Node load_yaml_file(const std::string& file) {
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) throw ScenarioError(file, "", "no such file");
    throw ScenarioError(file, "", "cannot open the file: " + ec.message());
  }
  if (std::filesystem::is_directory(status)) throw ScenarioError(file, "", "is a directory, not a YAML file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ScenarioError(file, "", "cannot open the file");
  // Read at most one chunk past the limit: a device or a pipe that never ends
  // (/dev/zero) is refused like a file too large, not read until memory runs out.
  std::string text;
  char chunk[1 << 16];
  while (in && text.size() <= kMaxFileBytes) {
    in.read(chunk, sizeof chunk);
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) throw ScenarioError(file, "", "cannot read the file");
  if (text.size() > kMaxFileBytes)
    throw ScenarioError(file, "", "larger than " + std::to_string(kMaxFileBytes / (1 << 20)) + " MiB: refused");
  return parse_yaml_text(text, file);
}

// Built with force_insert and an index of the keys: yaml-cpp looks a key up by walking the
// mapping, which made merging two mappings of many keys quadratic.
YAML::Node deep_merge(const YAML::Node& base, const YAML::Node& over) {
  if (!base.IsDefined() || base.IsNull()) return YAML::Clone(over);
  if (!over.IsDefined() || over.IsNull()) return YAML::Clone(base);
  if (!base.IsMap() || !over.IsMap()) return YAML::Clone(over);
  std::map<std::string, YAML::Node> overriding;
  for (const auto& kv : over) overriding.emplace(kv.first.as<std::string>(), kv.second);
  YAML::Node out(YAML::NodeType::Map);
  std::set<std::string> in_base;
  // Keys that state one quantity two ways (a collective's ctas set its compute_overlap):
  // the override's one replaces the base's other.
  static const std::map<std::string, std::string> alternative = {{"ctas", "compute_overlap"},
                                                                  {"compute_overlap", "ctas"}};
  for (const auto& kv : base) {  // base's keys in base's order, merged where over has them
    const std::string k = kv.first.as<std::string>();
    if (const auto a = alternative.find(k); a != alternative.end() && overriding.count(a->second)) continue;
    if (!in_base.insert(k).second) continue;
    const auto o = overriding.find(k);
    out.force_insert(k, o == overriding.end() ? YAML::Clone(kv.second) : deep_merge(kv.second, o->second));
  }
  for (const auto& kv : over) {  // then over's own keys, in over's order
    const std::string k = kv.first.as<std::string>();
    if (in_base.insert(k).second) out.force_insert(k, YAML::Clone(kv.second));
  }
  return out;
}

std::string dirname_of(const std::string& file) {
  const auto slash = file.find_last_of('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

std::string resolve_path(const std::string& relative_to_file, const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  return dirname_of(relative_to_file) + "/" + path;
}

}  // namespace partune::detail
