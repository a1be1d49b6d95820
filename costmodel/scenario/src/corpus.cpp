#include "partune/costmodel/corpus.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

namespace partune {

std::string gpu_generation(const Job& job) {
  const std::string& name = job.cluster.instance.gpu.name;
  return name.substr(0, name.find('-'));
}

ParallelKind parallel_kind(const Job& job) {
  const ParallelConfig& p = job.parallel;
  if (job.model.experts > 0) return ParallelKind::moe;
  if (p.context_parallel_degree > 1) return ParallelKind::context;
  if (p.sharded_data_parallel_degree > 1) return ParallelKind::sharded_data;
  if (p.tensor_parallel_degree > 1 || p.pipeline_parallel_degree > 1) return ParallelKind::tensor_pipeline;
  return ParallelKind::data;
}

const char* to_string(ParallelKind k) {
  switch (k) {
    case ParallelKind::moe: return "moe";
    case ParallelKind::context: return "context";
    case ParallelKind::sharded_data: return "zero3-fsdp";
    case ParallelKind::tensor_pipeline: return "tensor-pipeline";
    case ParallelKind::data: return "data";
  }
  return "?";
}

ErrorSummary summarize_errors(const std::vector<RowResult>& rows) {
  ErrorSummary s;
  s.rows = static_cast<int>(rows.size());
  if (rows.empty()) return s;
  std::vector<double> abs_errors;
  double abs_sum = 0, signed_sum = 0;
  int in10 = 0, in15 = 0, in20 = 0;
  for (const RowResult& r : rows) {
    const double a = std::fabs(r.error_pct);
    abs_errors.push_back(a);
    abs_sum += a;
    signed_sum += r.error_pct;
    in10 += a <= 10.0 ? 1 : 0;
    in15 += a <= 15.0 ? 1 : 0;
    in20 += a <= 20.0 ? 1 : 0;
    s.not_fit += r.fits ? 0 : 1;
  }
  std::sort(abs_errors.begin(), abs_errors.end());
  const std::size_t n = abs_errors.size();
  s.median_abs_pct = n % 2 ? abs_errors[n / 2] : 0.5 * (abs_errors[n / 2 - 1] + abs_errors[n / 2]);
  s.mape_pct = abs_sum / n;
  s.mean_signed_pct = signed_sum / n;
  s.within10 = static_cast<double>(in10) / n;
  s.within15 = static_cast<double>(in15) / n;
  s.within20 = static_cast<double>(in20) / n;
  return s;
}

namespace {

// Rows grouped by a key, groups in the order their first row appears.
std::vector<std::pair<std::string, ErrorSummary>> grouped(
    const std::vector<RowResult>& rows, const std::function<std::string(const RowResult&)>& key) {
  std::vector<std::pair<std::string, std::vector<RowResult>>> groups;
  for (const RowResult& r : rows) {
    const std::string k = key(r);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == k; });
    if (it == groups.end()) it = groups.insert(groups.end(), {k, {}});
    it->second.push_back(r);
  }
  std::vector<std::pair<std::string, ErrorSummary>> out;
  for (const auto& [k, members] : groups) out.emplace_back(k, summarize_errors(members));
  return out;
}

}  // namespace

CorpusSummary summarize_corpus(const ReproduceResult& r) {
  CorpusSummary c;
  c.all = summarize_errors(r.rows);
  c.by_source = grouped(r.rows, [](const RowResult& row) { return row.table; });
  c.by_gpu = grouped(r.rows, [](const RowResult& row) { return row.gpu; });
  c.by_kind = grouped(r.rows, [](const RowResult& row) { return row.parallel_kind; });
  return c;
}

}  // namespace partune
