#include "partune/costmodel/collective_comparison.hpp"

#include <algorithm>
#include <cmath>

#include "partune/costmodel/quantile.hpp"

namespace partune {

CollectiveAlgorithm modelled_algorithm(MeasuredAlgorithm a) {
  switch (a) {
    case MeasuredAlgorithm::tree: return CollectiveAlgorithm::tree;
    case MeasuredAlgorithm::ring: return CollectiveAlgorithm::ring;
    case MeasuredAlgorithm::nvls: return CollectiveAlgorithm::nvls;
    case MeasuredAlgorithm::unknown:  // what NCCL's tuner picks (nccl-tests leave NCCL_ALGO unset)
      break;
  }
  return CollectiveAlgorithm::nccl;
}

GroupSpan measured_span(int nodes, int gpus_per_node, const InstanceType& inst) {
  std::vector<int> members;
  members.reserve(static_cast<std::size_t>(nodes) * gpus_per_node);
  for (int node = 0; node < nodes; ++node)
    for (int i = 0; i < gpus_per_node; ++i) members.push_back(node * inst.gpus_per_node + i);
  GroupSpan span = members_span(std::move(members), inst.fabric_gpus());
  if (span.nodes > 1 && gpus_per_node < inst.gpus_per_node) {
    // The run's GPUs of a node are its first ones: ceil(g / gpus_per_nic) NICs serve them.
    const int per_nic = inst.gpus_per_nic();
    const int nics = (gpus_per_node + per_nic - 1) / per_nic;
    span.nic_sharers = static_cast<double>(gpus_per_node) / nics;
  }
  return span;
}

PointComparison compare_point(const MeasuredSeries& s, const MeasuredPoint& p, const InstanceType& inst) {
  PointComparison c;
  c.series = s.name;
  c.fabric = s.fabric;
  c.kind = s.kind;
  c.measured_algorithm = s.algorithm;
  c.algorithm = modelled_algorithm(s.algorithm);
  c.nodes = p.nodes;
  c.gpus_per_node = p.gpus_per_node;
  c.bytes = p.bytes;
  const MeasuredTime m = measured_time(p, s.kind);
  c.measured_s = m.seconds;
  c.measured_from = m.from;
  c.derived = m.derived;
  c.predicted_s = collective_cost(s.kind, c.algorithm, p.bytes, measured_span(p.nodes, p.gpus_per_node, inst), inst)
                      .total();
  c.error_pct = 100.0 * (c.predicted_s - c.measured_s) / c.measured_s;
  c.outlier = s.outlier;
  c.harness = s.harness;
  return c;
}

CollectiveErrors summarize_collective_errors(const std::vector<PointComparison>& points) {
  CollectiveErrors e;
  std::vector<double> abs_errors, harness_abs;
  for (const PointComparison& p : points) {
    const double a = std::fabs(p.error_pct);
    if (p.outlier) {
      ++e.outliers;
    } else if (p.apart()) {
      harness_abs.push_back(a);
      if (a > std::fabs(e.harness_worst_pct)) e.harness_worst_pct = p.error_pct;
    } else {
      abs_errors.push_back(a);
      if (a > std::fabs(e.worst_pct)) e.worst_pct = p.error_pct;
      e.within15 += a <= 15.0;
      e.within50 += a <= 50.0;
    }
  }
  e.points = static_cast<int>(abs_errors.size());
  e.median_abs_pct = abs_errors.empty() ? 0.0 : quantile(abs_errors, 0.5);
  e.harness_apart = static_cast<int>(harness_abs.size());
  e.harness_median_abs_pct = harness_abs.empty() ? 0.0 : quantile(harness_abs, 0.5);
  return e;
}

CollectiveComparison compare_collectives(const std::vector<MeasurementFile>& files) {
  CollectiveComparison out;
  std::vector<PointComparison> all;
  std::vector<std::pair<std::string, std::vector<PointComparison>>> by_fabric;
  for (const MeasurementFile& f : files) {
    FileComparison fc{f.path, f.source, f.fabric, f.instance.name, {}, {}};
    for (const MeasuredSeries& s : f.series)
      for (const MeasuredPoint& p : s.points) fc.points.push_back(compare_point(s, p, f.instance));
    fc.errors = summarize_collective_errors(fc.points);
    for (const PointComparison& p : fc.points) {
      auto it = std::find_if(by_fabric.begin(), by_fabric.end(), [&](const auto& b) { return b.first == p.fabric; });
      if (it == by_fabric.end()) it = by_fabric.insert(by_fabric.end(), {p.fabric, {}});
      it->second.push_back(p);
      all.push_back(p);
    }
    out.files.push_back(std::move(fc));
  }
  for (const auto& [fabric, points] : by_fabric) out.fabrics.push_back({fabric, summarize_collective_errors(points)});
  out.all = summarize_collective_errors(all);
  return out;
}

}  // namespace partune
