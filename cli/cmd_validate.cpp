// partune validate JOB.yaml | --suite DIR [--jobs a,b] [--steps N] [--warmup K] [--repeats R] [--set k=v] [--json] [--trace-dir DIR]
// partune validate --search JOB [--candidates K] (validate_search.hpp) | --replay DIR
// (validate_replay.hpp). The suite: validate/validation_suite.hpp; printed by validate_report.hpp.
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/costmodel/atomic_file.hpp"
#include "partune/launch/backend_process.hpp"
#include "partune/validate/targets.hpp"
#include "partune/validate/validation_suite.hpp"
#include "progress.hpp"
#include "validate_report.hpp"
#include "validate_replay.hpp"
#include "validate_search.hpp"

namespace partune::cli {

namespace {

struct ValidateOptions {
  validate::SuiteOptions suite;
  std::string trace_dir, search, replay;
  int candidates = 5;
  bool json = false;
};

[[noreturn]] void fail(const std::string& line, int code) {
  std::cerr << line;
  throw Exit{code};
}

// The suite: progress on a terminal, each failure as it happens, then every job and the
// summary; exit 1 when a job failed or the suite missed a target it printed.
void validate_jobs(const ValidateOptions& opt) {
  const std::vector<validate::SuiteJob> jobs = validate::load_suite(opt.suite);
  std::error_code ec;  // the trace folder is made before any job runs
  if (!opt.trace_dir.empty() && !std::filesystem::create_directories(opt.trace_dir, ec) && ec)
    throw OutputError(opt.trace_dir, "cannot create the folder: " + ec.message(), true);
  validate::SuiteProgress progress;
  if (::isatty(STDERR_FILENO))
    progress.runs = [](long done, long total) {
      if (done < total) return progress_bar(done, total, "runs");
      std::cerr << "\r\033[K" << std::flush;
    };
  progress.failed = [](const validate::SuiteJob& job, const std::string& error) {
    std::cerr << fmt::format("partune: error: {}: {}\n", job.file, error);
  };
  const validate::SuiteValidation v = validate::validate_suite(jobs, opt.suite, progress);
  nlohmann::json results = nlohmann::json::array();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    results.push_back(job_result(jobs[i], v.jobs[i], opt.trace_dir));
    if (!opt.json) std::cout << job_text(results.back()) << "\n" << std::flush;
  }
  const nlohmann::json s = summary_json(v.summary);
  if (opt.json) std::cout << nlohmann::json({{"jobs", results}, {"summary", s}}).dump(2) << "\n";
  else std::cout << summary_text(results, s);
  const std::string missed = validate::missed_targets(v.summary);
  if (!missed.empty()) std::cerr << "partune: validate: missed the targets: " << missed << "\n";
  if (v.summary.failed > 0 || !missed.empty()) throw Exit{1};
}

void check(const ValidateOptions& opt) {
  const validate::SuiteOptions& s = opt.suite;
  if (s.job.empty() + s.suite.empty() + opt.search.empty() + opt.replay.empty() != 3)
    fail("partune: error: validate takes one job file, --suite DIR, --search JOB or --replay DIR\n", 2);
  if (!opt.replay.empty()) return;  // predicts only: no backend needed
  if (!s.jobs.empty() && s.suite.empty()) fail("partune: error: --jobs selects jobs of a --suite\n", 2);
  if (s.warmup >= s.steps)
    fail(fmt::format("partune: error: --steps {} leaves no step after --warmup {}\n", s.steps, s.warmup), 2);
  if (::access(launch::runner_path().c_str(), X_OK) != 0)
    fail("partune: error: validate needs the LibTorch backend (build/partune-run), and this build has none\n", 2);
}

}  // namespace

void register_validate(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "validate", "Predicted vs measured: simulate each job and run it on the LibTorch backend, then compare");
  auto opt = std::make_shared<ValidateOptions>();
  validate::SuiteOptions& s = opt->suite;
  cmd->add_option("job", s.job, "job file (YAML)");
  cmd->add_option("--suite", s.suite, "every *.yaml job in this directory, sorted by name");
  cmd->add_option("--jobs", s.jobs, "with --suite: only these job files (names without .yaml, comma-separated)");
  cmd->add_option("--steps", s.steps, "backend steps per job, warm-up included")->capture_default_str()->check(count_in(1, 1000000));
  cmd->add_option("--warmup", s.warmup, "first steps left out of the measurement")->capture_default_str()->check(count_in(0, 1000000));
  cmd->add_option("--repeats", s.repeats,
                  "runs of each job, interleaved with the other jobs (A B C A B C); the step time is the "
                  "20th percentile of every timed step, with a bootstrap interval and the job's noise floor")
      ->capture_default_str()->check(count_in(1, 1000));
  cmd->add_option("--search", opt->search,
                  "search this job, run the top K candidates and K from the rest of the ranking on the backend "
                  "(search --execute K), and judge the ranking: Kendall's tau >= 0.8, regret <= 5%");
  cmd->add_option("--replay", opt->replay, "predict the GPU runs on record under DIR (e.g. docs/device-runs) again, each on "
                  "its own calibration, against what it measured: step, instruction kinds, kernel categories");
  cmd->add_option("--candidates", opt->candidates, "with --search: K")->capture_default_str()->check(count_in(1, 1000));
  cmd->add_option("--set", s.overrides, "override a key of every job, e.g. --set optimizer=sgd");
  cmd->add_option("--device", s.device,
                  "where the backend runs the jobs: cpu (scaled model, fp32) or cuda (the job's model in its precision)")
      ->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--trace-dir", opt->trace_dir, "write DIR/<job>-predicted.json and DIR/<job>-measured.json (Chrome traces)");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] {
    check(*opt);
    if (!opt->replay.empty()) return validate_replay(opt->replay, opt->json);
    if (!opt->search.empty())
      return validate_search(opt->search, opt->suite.overrides,
                             {opt->candidates, opt->suite.repeats, opt->suite.steps, opt->suite.warmup}, opt->json);
    validate_jobs(*opt);
  });
}

}  // namespace partune::cli
