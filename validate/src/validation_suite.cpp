// The predicted-vs-measured loop over a suite of jobs (validation_suite.hpp).
#include "partune/validate/validation_suite.hpp"

#include <algorithm>
#include <stdexcept>
#include <thread>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/validate/backend_run.hpp"
#include "partune/validate/job_suite.hpp"
#include "partune/costmodel/program_builder.hpp"

namespace partune::validate {

Prediction predict(const Job& ran) {
  Prediction p;
  p.programs = build_programs(ran, ProgramOptions{Granularity::layer});
  sim::SimOptions so;
  so.use_symmetry = false;
  so.record_events = true;
  so.granularity = Granularity::layer;
  p.result = sim::simulate(ran, so);
  return p;
}

Job as_run_on(Job ran, const std::string& device) {
  if (device == "cuda") {
    ran.training.kernel_fusion = KernelFusion::eager;
    ran.training.optimizer_impl = OptimizerImpl::torch;
  }
  return ran;
}

std::vector<std::string> as_run_settings(const std::string& device) {
  if (device == "cuda") return {"kernel_fusion=eager", "optimizer_impl=torch"};  // as_run_on's
  return {};
}

namespace {

void run_once(const SuiteJob& c, const SuiteOptions& opt, JobValidation& j) {
  if (!j.prediction) j.prediction = predict(c.ran);
  const BackendRun run = run_on_backend({c.file, opt.overrides, opt.steps, c.ran.world_size(), c.ran.model, opt.device});
  j.runs.push_back(compare_with_measurement(c.ran, j.prediction->programs, j.prediction->result, run.measured,
                                            opt.warmup));
  j.threads_per_rank = run.report.value("threads_per_rank", 0);
}

// Ranks (times their threads) that outnumber this machine's cores (on the CPU).
bool oversubscribed(const SuiteJob& c, int threads_per_rank, const std::string& device) {
  if (device != "cpu") return false;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 && static_cast<unsigned>(c.ran.world_size() * std::max(1, threads_per_rank)) > cores;
}

}  // namespace

std::vector<SuiteJob> load_suite(const SuiteOptions& opt) {
  std::vector<SuiteJob> jobs;
  for (const std::string& f : opt.suite.empty() ? std::vector<std::string>{opt.job} : suite_files(opt.suite, opt.jobs)) {
    SuiteJob c;
    c.file = f;
    c.job = load_job(f, opt.overrides);
    try {
      ScaleOptions whole;
      whole.whole = opt.device == "cuda";  // partune run --device cuda keeps the job's model
      c.ran = scaled_job(c.job, whole);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError(f, "model", e.what());
    }
    c.ran = as_run_on(c.ran, opt.device);
    jobs.push_back(std::move(c));
  }
  return jobs;
}

SuiteValidation validate_suite(const std::vector<SuiteJob>& jobs, const SuiteOptions& opt,
                               const SuiteProgress& progress) {
  SuiteValidation out;
  out.jobs.resize(jobs.size());
  // Interleaved: round r runs every job once (A B C A B C), so slow periods of the
  // machine fall on every job alike.
  const long total = static_cast<long>(opt.repeats * jobs.size());
  for (int r = 0; r < opt.repeats; ++r)
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      if (progress.runs) progress.runs(static_cast<long>(r * jobs.size() + i), total);
      JobValidation& j = out.jobs[i];
      if (!j.error.empty()) continue;
      try {
        run_once(jobs[i], opt, j);
      } catch (const std::exception& e) {
        j.error = e.what();
        if (progress.failed) progress.failed(jobs[i], j.error);
      }
    }
  if (progress.runs) progress.runs(total, total);
  std::vector<SuiteOutcome> outcomes;
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    JobValidation& j = out.jobs[i];
    if (j.error.empty()) j.pooled = pool_runs(j.runs);
    j.oversubscribed = oversubscribed(jobs[i], j.threads_per_rank, opt.device);
    outcomes.push_back({jobs[i].job.name, j.pooled ? &*j.pooled : nullptr, j.oversubscribed});
  }
  out.summary = summarize(outcomes);
  return out;
}

}  // namespace partune::validate
