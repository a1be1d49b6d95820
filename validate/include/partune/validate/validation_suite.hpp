#pragma once
// `partune validate`'s loop: each job of a suite is simulated (per-layer programs, every
// rank, on the job's instance type, with the model the backend runs) and run on the
// LibTorch backend (backend_run.hpp) several times, interleaved with the other jobs
// (A B C A B C), then compared (validation.hpp) and the suite summarised.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "partune/costmodel/scaled_job.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/sim/simulator.hpp"
#include "partune/validate/validation.hpp"

namespace partune::validate {

struct SuiteOptions {
  std::string job;                     // one job file, or
  std::string suite, jobs;             // every job file of a folder (job_suite.hpp)
  std::vector<std::string> overrides;  // --set, on every job
  int steps = 8, warmup = 3, repeats = 3;
  std::string device = "cpu";          // where the backend runs: cpu (scaled model) or cuda
};

// One job of the suite: its file, the job as loaded and the job as the backend runs it.
struct SuiteJob {
  std::string file;
  Job job;
  Job ran;  // its model scaled (scaled_job)
};

// Every file loaded and checked first: a typo in the 20th job stops the suite at once,
// naming file, key and reason (ScenarioError).
std::vector<SuiteJob> load_suite(const SuiteOptions& opt);

// A job's prediction: its per-layer programs and their simulation (every rank, no
// symmetry: the per-rank peaks are compared), made once for all its runs.
struct Prediction {
  std::vector<RankProgram> programs;
  sim::SimResult result;
};

// Every run of one job, and their comparison pooled.
struct JobValidation {
  std::optional<Prediction> prediction;
  std::vector<Comparison> runs;
  int threads_per_rank = 0;        // what the backend said of itself
  std::string error;               // set when the job failed (the first failure ends it)
  std::optional<Comparison> pooled;  // when it ran (pool_runs)
  bool oversubscribed = false;     // ranks times their threads outnumber this host's cores (cpu)
};

// The simulation validate compares with a run (Prediction above).
Prediction predict(const Job& ran);

// The job as the LibTorch backend runs it on `device`: on a GPU its eager operators
// (kernel_fusion eager) and torch's fused Adam over fp32 masters with the gradients'
// conversions (optimizer_impl torch), whatever the job file says (the backend has no other
// kernels); on the CPU as it is (the CPU profiles' per-layer overheads were measured on
// the backend's own layer).
Job as_run_on(Job ran, const std::string& device);
// The same rule as `--set` overrides (key=value), for a caller whose own overrides must come
// after it (validate --replay: a recorded run's replay.yaml says how an older backend ran).
std::vector<std::string> as_run_settings(const std::string& device);

struct SuiteValidation {
  std::vector<JobValidation> jobs;  // as load_suite's
  SuiteSummary summary;
};

struct SuiteProgress {
  // Before each backend run (done of total); once more with done == total when the runs
  // are over. Empty: none.
  std::function<void(long done, long total)> runs;
  // When a job fails, as it happens (the suite goes on without it).
  std::function<void(const SuiteJob& job, const std::string& error)> failed;
};

SuiteValidation validate_suite(const std::vector<SuiteJob>& jobs, const SuiteOptions& opt,
                               const SuiteProgress& progress = {});

}  // namespace partune::validate
