#pragma once
// The cost model's collective times against the published measurements
// (collective_measurements.hpp): every point predicted with collective_cost on the file's
// instance type, its error, and the errors summarised per file and per fabric
// (`partune bench collectives --compare`, docs/collectives.md). A report, not a gate.
#include <string>
#include <vector>

#include "partune/costmodel/collective_measurements.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune {

// The algorithm partune prices a measured point with: the one NCCL ran where partune has
// it (ring, tree), else what NCCL's tuner would pick (CollectiveAlgorithm::nccl: nccl-tests
// leave NCCL_ALGO unset). partune has no NVLS.
CollectiveAlgorithm modelled_algorithm(MeasuredAlgorithm a);

// The group of a run of `nodes` x `gpus_per_node` ranks (the first gpus_per_node GPUs of
// each node) on `inst`, as the estimator sees it: an NVLink domain of several nodes is one
// group level (fabric_gpus). With fewer ranks than GPUs on a node across nodes, the ranks
// behind one NIC share it (GroupSpan::nic_sharers).
GroupSpan measured_span(int nodes, int gpus_per_node, const InstanceType& inst);

struct PointComparison {
  std::string series;
  std::string fabric;  // the series' fabric
  CollectiveKind kind = CollectiveKind::all_reduce;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;  // what partune priced
  MeasuredAlgorithm measured_algorithm = MeasuredAlgorithm::unknown;
  int nodes = 1, gpus_per_node = 1;
  double bytes = 0;
  double measured_s = 0;
  const char* measured_from = "time_us";  // MeasuredTime::from
  bool derived = false;                   // the measured time is derived (not printed as a time)
  double predicted_s = 0;
  double error_pct = 0;  // 100 (predicted - measured) / measured: < 0 predicts too fast
  bool outlier = false;
  MeasurementHarness harness = MeasurementHarness::nccl_tests;
  // Kept out of the summaries: an outlier, or timed by a harness that measures more than
  // the collective (MeasurementHarness).
  bool apart() const { return outlier || harness != MeasurementHarness::nccl_tests; }
};

// |error| statistics over a set of points (outliers and other harnesses' points left out,
// each counted, with their own |error| statistics for the record).
struct CollectiveErrors {
  int points = 0;
  double median_abs_pct = 0;
  double worst_pct = 0;  // the signed error of largest magnitude
  int within15 = 0, within50 = 0;  // points with |error| <= 15%, <= 50%
  int outliers = 0;                // points of outlier series, not counted above
  int harness_apart = 0;           // points of other harnesses (not outliers), not counted above
  double harness_median_abs_pct = 0, harness_worst_pct = 0;  // over those points
};
CollectiveErrors summarize_collective_errors(const std::vector<PointComparison>& points);

struct FileComparison {
  std::string path, source, fabric, instance;
  std::vector<PointComparison> points;
  CollectiveErrors errors;
};

struct FabricComparison {
  std::string fabric;
  CollectiveErrors errors;
};

struct CollectiveComparison {
  std::vector<FileComparison> files;
  std::vector<FabricComparison> fabrics;  // in the order of first appearance
  CollectiveErrors all;
};

PointComparison compare_point(const MeasuredSeries& s, const MeasuredPoint& p, const InstanceType& inst);
CollectiveComparison compare_collectives(const std::vector<MeasurementFile>& files);

}  // namespace partune
