#pragma once
// `partune validate --replay DIR`: today's prediction of GPU runs on record. Each folder
// under DIR that holds a validate.json (what scripts/device-check.sh wrote on a lent GPU)
// is one run: every job in it is predicted again, as validate would predict it now, on the
// profile calibrated in that same run, and compared with what that run measured: the step
// (its 20th percentile), the instruction kinds (forward, backward, optimizer step) and,
// where the run profiled the job's step kernel by kernel (breakdown.json), the kernel
// categories, the launches and the time no kernel ran.
//
// The profile is the run's `<instance type>.yaml` (else scenarios/clusters/). Keys the
// run's calibration predates are completed from what it recorded, by the rule `calibrate`
// now applies (kernels/src/gpu_profile_file.cpp): the shared intercept of its back-to-back
// eager calls is the host's dispatch of a kernel (the device's own gap between kernels,
// the datasheet's kernel_overhead); its LayerNorm and copy bandwidths (calibrate.json) the
// norm and copy classes' rates; the strided class's rate, which it did not measure, the
// datasheet's. A run folder may hold replay.yaml: `set:` overrides (key=value, as --set)
// stating how the backend ran its jobs when the run's own files do not say, each with the
// line that records it.
#include <string>
#include <vector>

#include "partune/validate/validation.hpp"

namespace partune::validate {

struct CategoryComparison {
  std::string category;  // the profile's: gemm, attention, elementwise, reduction_norm, copy, optimizer
  double predicted_s = 0, measured_s = 0, error_pct = 0;
};

struct ReplayJob {
  std::string run;      // the run's folder
  std::string job, file;
  std::string profile;  // the instance-type file predicted on
  bool low_precision_gemms = false;  // fp8: the step's target is 15%, else 10%
  double predicted_step_s = 0, measured_step_s = 0, step_error_pct = 0;
  double noise_floor_pct = 0;  // the run's own spread of the step
  std::vector<KindComparison> kinds;
  // From the run's per-kernel profile of this job: empty when it has none, or one of
  // another model (`breakdown_note` says why).
  std::vector<CategoryComparison> categories;
  double predicted_idle_s = 0, measured_idle_s = 0, measured_other_s = 0;
  long predicted_launches = 0, measured_launches = 0;
  std::string breakdown_note;
  double step_target_pct() const { return low_precision_gemms ? 15.0 : 10.0; }
};

// Every run under `dir`, sorted by folder, then its jobs in the order recorded. Throws
// ScenarioError naming the file and key that do not read.
std::vector<ReplayJob> replay_runs(const std::string& dir);

// The error within which a kernel category counts as predicted (the 20%).
inline constexpr double kCategoryTargetPct = 20.0;

struct ReplaySummary {
  int jobs = 0, steps_within = 0;
  int categories = 0, categories_within = 0;
  double median_abs_step_error_pct = 0;
  double worst_abs_step_error_pct = 0;
  std::string worst;  // run/job
};
ReplaySummary summarize_replay(const std::vector<ReplayJob>& jobs);

}  // namespace partune::validate
