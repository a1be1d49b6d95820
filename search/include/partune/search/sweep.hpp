#pragma once
// What-if sweeps (`partune sweep`): the cartesian product of axes, each a job key and
// its values, over one job. A point is the job with its axes' values set as `--set`
// sets them (load_job's overrides), evaluated as written (the estimator) or searched
// (the best configuration for that point, as `partune search`). The job comes loaded
// (SweepJob): search/ reads no files; the caller's loader sets each point's keys.
#include <functional>
#include <string>
#include <vector>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/job_rules.hpp"
#include "partune/search/tuner.hpp"

namespace partune::search {

struct SweepAxis {
  std::string key;                  // any key --set takes: short or section.key
  std::vector<std::string> values;  // YAML values, as --set parses them
};
// "KEY=V1,V2,..." (a comma inside [] or {} belongs to its value). Throws
// std::invalid_argument naming the text and the reason.
SweepAxis parse_axis(const std::string& text);
// The job file's `sweep:` axes, then each --vary; a --vary of a key the file sweeps
// replaces that axis.
std::vector<SweepAxis> sweep_axes(const std::vector<std::string>& from_file, const std::vector<std::string>& vary);
// Points in the product: the last axis varies fastest.
long sweep_size(const std::vector<SweepAxis>& axes);

// The job a sweep varies, loaded once by its caller. `load` gives the job file again with
// a list of --set overrides applied, held to `rules` (costmodel's load_job or parse_job
// over the file the caller read: each point's keys, and the probes of its micro-batches;
// JobRules::every for a point estimated as written, JobRules::settings for a point
// searched); `base` is load(the sweep's own --set overrides, JobRules::settings), the job
// as the caller checked it: its parallel layout need not be legal, since the points'
// searches or micro-batches change it. `origin` names the job in errors.
// `file_sets_microbatches`: the file itself sets parallel.microbatches (the caller reads
// that from the file; MicrobatchPolicy keeps them then). `file_gives_layout`: the file
// has a parallel: section (without one, and no --set or axis of a layout key, the sweep
// searches each point: there is no layout to estimate).
struct SweepJob {
  Job base;
  std::string origin;
  bool file_sets_microbatches = false;
  bool file_gives_layout = true;
  std::function<Job(const std::vector<std::string>& overrides, JobRules rules)> load;
};

// The axes of a sweep of `job`: its file's sweep: section, then `vary` (sweep_axes). A bad
// one throws a ScenarioError naming the job's origin and `vary_key` (the option or
// argument the axes came from).
std::vector<SweepAxis> job_sweep_axes(const SweepJob& job, const std::vector<std::string>& vary,
                                      const std::string& vary_key);

struct SweepOptions {
  std::vector<SweepAxis> axes;
  std::vector<std::string> overrides;  // --set, applied before each point's own
  bool search = false;                 // the best configuration of each point
  SearchOptions search_options;        // with search (its own workers; points one by one)
  int threads = 0;                     // estimator points at once; 0: one per core
  // Called as points finish: (done, total). From the calling thread only.
  std::function<void(long, long)> progress;
  // Only points i with i % stride == offset (a share of the work: MPI ranks).
  long offset = 0, stride = 1;
};

// How the sweep sets each point's parallel.microbatches. A job that leaves them open
// (no parallel.microbatches in the file, no --set of it, no axis of it) has them chosen
// at every point as Megatron does: the global batch and the micro-batch size stay the
// job's own, so micro-batches = global_batch / (data-parallel degree x micro-batch size x
// gradient_accumulation); where that size does not divide a point's share of the batch,
// the largest smaller one that does (and, with virtual_stages > 1, gives a multiple of
// pipeline_parallel_degree). A job that fixes them keeps them at every point, and a point
// they do not fit is invalid, saying so. With --search each point's search chooses them
// (the job's own only have to let the point load).
struct MicrobatchPolicy {
  bool adapted = false;     // the sweep sets them at each point
  bool searched = false;    // each point's search chooses them (SweepOptions::search, or searched_because)
  // Searched without --search: why ("the job file gives no parallel: section"); else empty.
  std::string searched_because;
  std::string fixed_by;     // not adapted: what fixes them ("the job file's parallel.microbatches", ...)
  int microbatches = 0;     // the job's own (with the --set overrides)
  int microbatch_size = 0;  // sequences per micro-batch the job's own give (adapted: kept where it divides)
};
// The policy of this sweep. A job whose file gives no parallel: section, where neither
// --set nor an axis names a layout key (a search knob, or parallel.*), is searched at
// every point even without options.search, and the policy says why.
MicrobatchPolicy microbatch_policy(const SweepJob& job, const SweepOptions& options);

// What became of a point: a consistent job that fits in memory; a consistent job that
// does not (with --search: no configuration of it fits); not a consistent job at all.
enum class PointStatus { fits, does_not_fit, invalid };
const char* to_string(PointStatus s);  // "fits", "does not fit", "invalid"

struct SweepPoint {
  long index = 0;
  std::vector<std::string> values;  // one per axis
  PointStatus status = PointStatus::invalid;
  std::string reason;               // why not, when it does not fit or is invalid
  Job job;                          // the point's job (with search: the winner); not when invalid
  std::string configuration;        // describe(job); empty when invalid
  bool has_metrics = false;         // metrics are set (not when invalid, nor when no configuration fits)
  StepMetrics metrics;              // estimate(job), or the search's view of its winner
  bool simulated = false;           // metrics are the simulator's
};

// Every point of the product (or the options' share of them), in product order, with
// its micro-batches set by microbatch_policy.
// Throws the first point's ScenarioError when no point could be loaded at all (a key or
// value wrong for every point is a mistake in the input, not a what-if); for a share of
// the points (stride > 1) the caller, who sees them all, judges.
std::vector<SweepPoint> run_sweep(const SweepJob& job, const SweepOptions& options);

}  // namespace partune::search
