#include "partune/costmodel/table.hpp"

#include "partune/costmodel/corpus.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "scenario_internal.hpp"
#include "yaml_reader.hpp"

namespace partune {

namespace fs = std::filesystem;
using detail::Reader;

const char* to_string(Metric m) {
  switch (m) {
    case Metric::hw_tflops_per_gpu: return "hw_tflops_per_gpu";
    case Metric::tflops_per_gpu: return "tflops_per_gpu";
    case Metric::samples_per_s: return "samples_per_s";
    case Metric::tokens_per_s: return "tokens_per_s";
    case Metric::speedup: return "speedup";
  }
  return "?";
}

const char* unit_of(Metric m) {
  switch (m) {
    case Metric::hw_tflops_per_gpu: return "TFLOPs/GPU (hardware, recompute counted)";
    case Metric::tflops_per_gpu: return "TFLOPs/GPU (model)";
    case Metric::samples_per_s: return "samples/s";
    case Metric::tokens_per_s: return "tokens/s";
    case Metric::speedup: return "x";
  }
  return "";
}

namespace {

// A row's job: its own mapping (or a path) deep-merged over the table's `defaults`.
Job row_job(const YAML::Node& defaults, const YAML::Node& value, const std::string& file,
            const std::string& key) {
  YAML::Node node = value;
  std::string origin = file;
  if (value.IsScalar()) {
    origin = detail::resolve_path(file, value.as<std::string>());
    node = detail::load_yaml_file(origin);
    return detail::parse_job_node(detail::deep_merge(defaults, node), origin, "");
  }
  if (!value.IsMap()) throw ScenarioError(file, key, "expected a job mapping or a path to a job file");
  return detail::parse_job_node(detail::deep_merge(defaults, node), file, key);
}

Table load_table_file(const std::string& file) {
  const YAML::Node root = detail::load_yaml_file(file);
  const Reader r(root, file, "");
  r.allow_only({"kind", "name", "source", "description", "assumptions", "defaults", "rows"});
  if (r.has("kind") && r.get_string("kind") != "table") r.fail("kind", "expected 'table'");
  Table t;
  t.file = file;
  t.name = r.get_string("name", fs::path(file).stem().string());
  t.source = r.get_string("source", "");
  const YAML::Node defaults = root["defaults"];
  if (defaults.IsDefined() && !defaults.IsNull() && !defaults.IsMap())
    r.fail("defaults", "expected a mapping (job keys shared by every row)");
  const YAML::Node rows = root["rows"];
  if (!rows.IsSequence() || rows.size() == 0) r.fail("rows", "expected a non-empty list of rows");
  std::map<std::string, int> seen;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::string key = "rows[" + std::to_string(i) + "]";
    const Reader row(rows[i], file, key);
    row.allow_only({"name", "metric", "published", "job", "baseline", "before", "note", "known_gap", "source",
                    "stack", "assumptions"});
    TableRow tr;
    tr.name = row.get_string("name");
    if (seen.count(tr.name)) row.fail("name", "'" + tr.name + "' is used by another row");
    seen[tr.name] = 1;
    tr.metric = static_cast<Metric>(row.get_choice(
        "metric", {"hw_tflops_per_gpu", "tflops_per_gpu", "samples_per_s", "tokens_per_s", "speedup"}, 0));
    tr.published = row.get_positive("published");
    tr.note = row.get_string("note", "");
    tr.source = row.get_string("source", "");
    tr.stack = row.get_string("stack", "");
    tr.assumptions = row.get_string("assumptions", "");
    if (row.has("known_gap")) {
      tr.known_gap = row.get_string("known_gap");
      if (tr.known_gap.find_first_not_of(" \t\n") == std::string::npos)
        row.fail("known_gap", "empty: say why the row is far off, or leave the key out");
    }
    tr.before = row.get_string("before", "");
    if (!tr.before.empty() && tr.metric == Metric::speedup)
      row.fail("before", "a speedup row is its own before/after pair (job vs baseline)");
    if (!row.has("job")) row.fail("job", "missing");
    tr.job = row_job(defaults, rows[i]["job"], file, key + ".job");
    if (!rows[i]["job"].IsScalar() && !rows[i]["job"]["name"].IsDefined()) tr.job.name = tr.name;
    if (tr.metric == Metric::speedup) {
      if (!row.has("baseline")) row.fail("baseline", "a speedup row needs the job it is compared with");
      tr.has_baseline = true;
      tr.baseline = row_job(defaults, rows[i]["baseline"], file, key + ".baseline");
    } else if (row.has("baseline")) {
      row.fail("baseline", "only speedup rows have a baseline");
    }
    t.rows.push_back(std::move(tr));
  }
  for (std::size_t i = 0; i < t.rows.size(); ++i)
    if (!t.rows[i].before.empty() && !seen.count(t.rows[i].before))
      throw ScenarioError(file, "rows[" + std::to_string(i) + "].before",
                          "no row named '" + t.rows[i].before + "' in this table");
  return t;
}

double metric_value(Metric m, const Estimate& e, const Estimate* baseline) {
  switch (m) {
    case Metric::hw_tflops_per_gpu: return e.hw_tflops_per_gpu;
    case Metric::tflops_per_gpu: return e.tflops_per_gpu;
    case Metric::samples_per_s: return e.samples_per_s;
    case Metric::tokens_per_s: return e.tokens_per_s;
    case Metric::speedup: return baseline ? e.samples_per_s / baseline->samples_per_s : 0.0;
  }
  return 0;
}

}  // namespace

std::vector<Table> load_tables(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& p : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (fs::is_directory(st)) {
      std::vector<std::string> in_dir;
      for (fs::directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec))
        if (it->path().extension() == ".yaml" || it->path().extension() == ".yml")
          in_dir.push_back(it->path().string());
      if (ec) throw ScenarioError(p, "", "cannot list the folder: " + ec.message());
      std::sort(in_dir.begin(), in_dir.end());
      if (in_dir.empty()) throw ScenarioError(p, "", "no table files (*.yaml) in this folder");
      files.insert(files.end(), in_dir.begin(), in_dir.end());
    } else if (fs::exists(st)) {
      files.push_back(p);
    } else {
      throw ScenarioError(p, "", ec && ec != std::errc::no_such_file_or_directory ? ec.message()
                                                                                   : "no such file or folder");
    }
  }
  std::vector<Table> tables;
  for (const auto& f : files) {
    try {
      tables.push_back(load_table_file(f));
    } catch (const ScenarioError&) {
      throw;
    } catch (const std::exception& e) {  // a file-system or yaml-cpp error: still names the file
      throw ScenarioError(f, "", e.what());
    }
  }
  return tables;
}

ReproduceResult reproduce(const std::vector<Table>& tables, const JobEvaluator& evaluate) {
  ReproduceResult out;
  double abs_sum = 0, tflops_sum = 0;
  int tflops_rows = 0;
  for (const Table& t : tables) {
    std::map<std::string, std::pair<double, double>> by_name;  // published, predicted
    const std::size_t first = out.rows.size();
    double table_abs_sum = 0;
    for (const TableRow& row : t.rows) {
      const Estimate e = evaluate(row.job);
      Estimate base;
      if (row.has_baseline) base = evaluate(row.baseline);
      RowResult rr;
      rr.table = t.name;
      rr.row = row.name;
      rr.metric = row.metric;
      rr.published = row.published;
      rr.predicted = metric_value(row.metric, e, row.has_baseline ? &base : nullptr);
      rr.error_pct = 100.0 * (rr.predicted - rr.published) / rr.published;
      rr.before = row.before;
      rr.fits = e.fits && (!row.has_baseline || base.fits);
      rr.known_gap = row.known_gap;
      rr.gpu = gpu_generation(row.job);
      rr.parallel_kind = to_string(parallel_kind(row.job));
      by_name[row.name] = {rr.published, rr.predicted};
      abs_sum += std::fabs(rr.error_pct);
      table_abs_sum += std::fabs(rr.error_pct);
      if (row.metric == Metric::hw_tflops_per_gpu || row.metric == Metric::tflops_per_gpu) {
        tflops_sum += std::fabs(rr.error_pct);
        ++tflops_rows;
      }
      out.rows.push_back(rr);
    }
    TableSummary ts;
    ts.table = t.name;
    ts.rows = static_cast<int>(out.rows.size() - first);
    if (ts.rows > 0) ts.mape_pct = table_abs_sum / ts.rows;
    out.tables.push_back(ts);
    for (std::size_t i = first; i < out.rows.size(); ++i) {
      RowResult& rr = out.rows[i];
      if (rr.before.empty()) continue;
      const auto& [pub_before, pred_before] = by_name[rr.before];
      const bool paper_up = rr.published > pub_before;
      const bool model_up = rr.predicted > pred_before;
      rr.direction_ok = paper_up == model_up;
      ++out.pairs;
      out.pairs_right += rr.direction_ok ? 1 : 0;
    }
  }
  // Speedup rows compare two jobs; their direction is the sign of (speedup - 1).
  for (RowResult& rr : out.rows) {
    if (rr.metric != Metric::speedup) continue;
    rr.direction_ok = (rr.published > 1.0) == (rr.predicted > 1.0);
    ++out.pairs;
    out.pairs_right += rr.direction_ok ? 1 : 0;
  }
  if (!out.rows.empty()) out.mape_pct = abs_sum / out.rows.size();
  if (tflops_rows > 0) out.mape_tflops_pct = tflops_sum / tflops_rows;
  out.tflops_rows = tflops_rows;
  return out;
}

}  // namespace partune
