#include "partune/costmodel/collective_measurements.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "scenario_internal.hpp"
#include "yaml_reader.hpp"

namespace partune {

namespace fs = std::filesystem;
using detail::Reader;

const char* to_string(MeasuredAlgorithm a) {
  switch (a) {
    case MeasuredAlgorithm::ring: return "ring";
    case MeasuredAlgorithm::tree: return "tree";
    case MeasuredAlgorithm::nvls: return "nvls";
    case MeasuredAlgorithm::unknown: return "unknown";
  }
  return "?";
}

const char* to_string(MeasurementHarness h) {
  switch (h) {
    case MeasurementHarness::nccl_tests: return "nccl-tests";
    case MeasurementHarness::nccl_tests_single_process: return "nccl-tests-single-process";
    case MeasurementHarness::torch_blocking: return "torch-blocking";
  }
  return "?";
}

double busbw_factor(CollectiveKind kind, int ranks) {
  const double n = ranks;
  return (kind == CollectiveKind::all_reduce ? 2.0 : 1.0) * (n - 1) / n;
}

MeasuredTime measured_time(const MeasuredPoint& p, CollectiveKind kind) {
  if (p.time_us > 0) return {p.time_us * 1e-6, "time_us", false};
  if (p.busbw_GBps > 0) return {p.bytes * busbw_factor(kind, p.ranks()) / (p.busbw_GBps * 1e9), "busbw", true};
  if (p.algbw_GBps > 0) return {p.bytes / (p.algbw_GBps * 1e9), "algbw", true};
  return {0.5 * (p.time_us_low + p.time_us_high) * 1e-6, "range", true};
}

namespace {

const char* const kColumns[] = {"bytes",      "nodes",      "gpus_per_node", "time_us",
                                "time_us_low", "time_us_high", "algbw_GBps",   "busbw_GBps"};

// The columns of a series, each one of kColumns, once; `bytes` among them.
MeasurementHarness read_harness(const Reader& r, MeasurementHarness fallback) {
  return static_cast<MeasurementHarness>(
      r.get_choice("harness", {"nccl-tests", "nccl-tests-single-process", "torch-blocking"}, static_cast<int>(fallback)));
}

std::vector<std::string> read_columns(const Reader& s) {
  if (!s.has("columns") || !s.node()["columns"].IsSequence()) s.fail("columns", "missing or not a list of column names");
  std::vector<std::string> cols;
  for (const auto& c : s.node()["columns"]) {
    const std::string name = c.IsScalar() ? c.Scalar() : "";
    if (std::find(std::begin(kColumns), std::end(kColumns), name) == std::end(kColumns))
      s.fail("columns", "unknown column '" + name +
                            "' (allowed: bytes, nodes, gpus_per_node, time_us, time_us_low, time_us_high, "
                            "algbw_GBps, busbw_GBps)");
    if (std::find(cols.begin(), cols.end(), name) != cols.end()) s.fail("columns", "column '" + name + "' twice");
    cols.push_back(name);
  }
  const auto has = [&](const char* c) { return std::find(cols.begin(), cols.end(), c) != cols.end(); };
  if (!has("bytes")) s.fail("columns", "no 'bytes' column");
  if (has("time_us_low") != has("time_us_high")) s.fail("columns", "time_us_low and time_us_high go together");
  return cols;
}

// One cell: a number in (0, hi], or -1 for `~` (not printed by the source).
double read_cell(const Reader& s, const YAML::Node& cell, const std::string& key, double hi) {
  if (!cell.IsDefined() || cell.IsNull()) return -1;
  double v = 0;
  if (!cell.IsScalar() || !YAML::convert<double>::decode(cell, v) || !std::isfinite(v))
    s.fail(key, "expected a number or ~, got '" + (cell.IsScalar() ? cell.Scalar() : std::string("a collection")) + "'");
  if (v <= 0 || v > hi) s.fail(key, "must be in (0, " + fmt::format("{:g}", hi) + "], got " + cell.Scalar());
  return v;
}

MeasuredPoint read_point(const Reader& s, const YAML::Node& row, const std::string& key,
                         const std::vector<std::string>& cols, MeasuredPoint p, int max_per_node) {
  if (!row.IsSequence() || row.size() != cols.size())
    s.fail(key, "expected a row of " + std::to_string(cols.size()) + " values (the columns)");
  p.bytes = -1;
  for (std::size_t c = 0; c < cols.size(); ++c) {
    const std::string& col = cols[c];
    const std::string cell_key = key + "." + col;
    if (col == "nodes" || col == "gpus_per_node") {
      const double v = read_cell(s, row[c], cell_key, col == "nodes" ? 65536 : max_per_node);
      if (v < 0 || v != static_cast<int>(v)) s.fail(cell_key, "expected a whole number");
      (col == "nodes" ? p.nodes : p.gpus_per_node) = static_cast<int>(v);
      continue;
    }
    const double v = read_cell(s, row[c], cell_key, col == "bytes" ? 1e13 : 1e9);
    if (col == "bytes") p.bytes = v;
    else if (col == "time_us") p.time_us = v;
    else if (col == "time_us_low") p.time_us_low = v;
    else if (col == "time_us_high") p.time_us_high = v;
    else if (col == "algbw_GBps") p.algbw_GBps = v;
    else p.busbw_GBps = v;
  }
  if (p.bytes < 0) s.fail(key + ".bytes", "missing: every row gives its size");
  const bool range = p.time_us_low > 0 && p.time_us_high > 0;
  if ((p.time_us_low > 0) != (p.time_us_high > 0)) s.fail(key, "time_us_low and time_us_high go together");
  if (range && p.time_us_low > p.time_us_high) s.fail(key + ".time_us_low", "above time_us_high");
  if (p.time_us < 0 && p.algbw_GBps < 0 && p.busbw_GBps < 0 && !range)
    s.fail(key, "no time or bandwidth in this row");
  if (p.ranks() < 2) s.fail(key, "a collective needs 2 ranks or more (nodes x gpus_per_node)");
  return p;
}

MeasuredSeries read_series(const Reader& s, const MeasurementFile& f) {
  s.allow_only({"name", "fabric", "collective", "algorithm", "nodes", "gpus_per_node", "columns", "points",
                "outlier", "caveat", "harness"});
  MeasuredSeries out;
  out.name = s.get_string("name");
  out.fabric = s.get_string("fabric", f.fabric);
  if (!s.has("collective")) s.fail("collective", "missing");
  const CollectiveKind kinds[] = {CollectiveKind::all_reduce, CollectiveKind::all_gather,
                                  CollectiveKind::reduce_scatter, CollectiveKind::all_to_all};
  out.kind = kinds[s.get_choice("collective", {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}, 0)];
  if (!s.has("algorithm")) s.fail("algorithm", "missing (ring, tree, nvls or unknown)");
  out.algorithm = static_cast<MeasuredAlgorithm>(s.get_choice("algorithm", {"ring", "tree", "nvls", "unknown"}, 3));
  out.outlier = s.get_bool("outlier", false);
  out.harness = read_harness(s, f.harness);
  out.caveat = s.get_string("caveat", "");
  const std::vector<std::string> cols = read_columns(s);
  const auto in_cols = [&](const char* c) { return std::find(cols.begin(), cols.end(), c) != cols.end(); };
  const int max_per_node = f.instance.gpus_per_node;
  MeasuredPoint base;
  base.nodes = s.get_int("nodes", 1, 65536, 0);
  base.gpus_per_node = s.get_int("gpus_per_node", 1, max_per_node, 0);
  if (base.nodes == 0 && !in_cols("nodes")) s.fail("nodes", "missing (here or as a column)");
  if (base.gpus_per_node == 0 && !in_cols("gpus_per_node")) s.fail("gpus_per_node", "missing (here or as a column)");
  const YAML::Node points = s.node()["points"];
  if (!points.IsSequence() || points.size() == 0) s.fail("points", "missing or not a list of rows");
  for (std::size_t i = 0; i < points.size(); ++i)
    out.points.push_back(read_point(s, points[i], "points[" + std::to_string(i) + "]", cols, base, max_per_node));
  return out;
}

MeasurementFile parse_root(const YAML::Node& root, const std::string& origin) {
  const Reader r(root, origin, "");
  r.allow_only({"kind", "source", "instance_type", "fabric", "harness", "series"});
  if (r.get_string("kind") != "collective_measurements")
    r.fail("kind", "expected 'collective_measurements', got '" + r.get_string("kind") + "'");
  MeasurementFile f;
  f.path = origin;
  f.source = r.get_string("source");
  f.fabric = r.get_string("fabric");
  f.harness = read_harness(r, MeasurementHarness::nccl_tests);
  // A preset name (scenarios/clusters/), a path, or an inline mapping (with `base:`).
  if (!r.has("instance_type")) r.fail("instance_type", "missing");
  const detail::Resolved ref = detail::resolve_reference(r.node()["instance_type"], origin, "instance_type", "clusters");
  f.instance = detail::parse_instance_type(Reader(ref.node, ref.file, ref.key));
  const YAML::Node series = r.node()["series"];
  if (!series.IsSequence() || series.size() == 0) r.fail("series", "missing or not a list of series");
  for (std::size_t i = 0; i < series.size(); ++i) {
    const Reader s(series[i], origin, "series[" + std::to_string(i) + "]");
    s.require_map();
    f.series.push_back(read_series(s, f));
  }
  return f;
}

}  // namespace

MeasurementFile parse_measurements(const std::string& yaml_text, const std::string& origin) {
  return parse_root(detail::parse_yaml_text(yaml_text, origin), origin);
}

MeasurementFile load_measurement_file(const std::string& path) {
  try {
    return parse_root(detail::load_yaml_file(path), path);
  } catch (const ScenarioError&) {
    throw;
  } catch (const std::exception& e) {  // a file-system or yaml-cpp error: still names the file
    throw ScenarioError(path, "", e.what());
  }
}

std::vector<MeasurementFile> load_measurements(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::is_directory(st)) {
    if (!fs::exists(st)) throw ScenarioError(path, "", "no such file or folder");
    return {load_measurement_file(path)};
  }
  std::vector<std::string> files;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".yaml" || it->path().extension() == ".yml") files.push_back(it->path().string());
  if (ec) throw ScenarioError(path, "", "cannot list the folder: " + ec.message());
  if (files.empty()) throw ScenarioError(path, "", "no measurement files (*.yaml) in this folder");
  std::sort(files.begin(), files.end());
  std::vector<MeasurementFile> out;
  for (const auto& f : files) out.push_back(load_measurement_file(f));
  return out;
}

}  // namespace partune
