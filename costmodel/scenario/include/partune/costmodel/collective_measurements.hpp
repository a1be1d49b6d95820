#pragma once
// Published NCCL collective measurements (scenarios/measurements/collectives/, one file per
// source and fabric; the format and the conversions in that folder's README.md and in
// docs/collectives.md). A file names the instance type partune models the machine with and
// holds series of points: a size and what the source prints for it (a time, algbw,
// busbw, or a range of times). Every error is a ScenarioError naming file, key and reason.
#include <string>
#include <vector>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/hardware.hpp"

namespace partune {

// The algorithm NCCL ran, where the source names it.
enum class MeasuredAlgorithm { ring, tree, nvls, unknown };
const char* to_string(MeasuredAlgorithm a);

// How the source timed its calls, read from the benchmark's own code. A training step's
// collectives run as nccl-tests times them: one process per GPU, calls enqueued back to
// back, the mean over many. The other two time more than the collective:
// - nccl_tests_single_process: nccl-tests with `-g N`, one thread enqueueing every GPU's
//   launch of each call (Azure's AI-benchmarking-guide runs `all_reduce_perf -g 8`), so a
//   call cannot be shorter than N host launches;
// - torch_blocking: one torch.distributed call at a time after a barrier, each rank timing
//   from its own start event (stas00's all_reduce_bench.py), so the ranks' arrival skew
//   after the barrier and the host's call are in every time.
// partune models neither host cost: such points are shown with their errors and summarised
// apart from the fabric's (collective_comparison.hpp).
enum class MeasurementHarness { nccl_tests, nccl_tests_single_process, torch_blocking };
const char* to_string(MeasurementHarness h);

// One row of a published table. A value the source does not print is < 0.
struct MeasuredPoint {
  int nodes = 1;            // nodes of the run
  int gpus_per_node = 1;    // ranks on each node
  double bytes = 0;         // nccl-tests' size: collective.hpp's convention
  double time_us = -1;      // us
  double time_us_low = -1;  // a range the source gives for a span of sizes, us
  double time_us_high = -1;
  double algbw_GBps = -1;   // 1e9 bytes/s
  double busbw_GBps = -1;
  int ranks() const { return nodes * gpus_per_node; }
};

// One run, or one column of a published table.
struct MeasuredSeries {
  std::string name;
  std::string fabric;  // the file's unless the series names its own
  CollectiveKind kind = CollectiveKind::all_reduce;
  MeasuredAlgorithm algorithm = MeasuredAlgorithm::unknown;
  bool outlier = false;  // a reported anomaly: shown, kept out of the summaries
  MeasurementHarness harness = MeasurementHarness::nccl_tests;  // the file's unless the series names its own
  std::string caveat;
  std::vector<MeasuredPoint> points;
};

struct MeasurementFile {
  std::string path;
  std::string source;        // the reference file, its section and the original source
  std::string fabric;
  MeasurementHarness harness = MeasurementHarness::nccl_tests;
  InstanceType instance;     // loaded from the file's instance_type
  std::vector<MeasuredSeries> series;
};

// nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md): busbw = algbw x factor, with
// 2(n-1)/n for all_reduce and (n-1)/n for all_gather, reduce_scatter and all_to_all.
double busbw_factor(CollectiveKind kind, int ranks);

// The time a point measured: its time_us, else derived from busbw (S x factor / busbw),
// from algbw (S / algbw) or the middle of its range, in that order.
struct MeasuredTime {
  double seconds = 0;
  const char* from = "time_us";  // "time_us", "busbw", "algbw" or "range"
  bool derived = false;          // not printed as a time by the source
};
MeasuredTime measured_time(const MeasuredPoint& p, CollectiveKind kind);

// Loads one file, or every *.yaml of a folder (sorted by name).
std::vector<MeasurementFile> load_measurements(const std::string& path);
MeasurementFile load_measurement_file(const std::string& path);
// Parses a file's YAML text; `origin` names it in errors.
MeasurementFile parse_measurements(const std::string& yaml_text, const std::string& origin);

}  // namespace partune
