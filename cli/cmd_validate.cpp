// partune validate JOB.yaml | --suite DIR [--jobs a,b] [--steps N] [--warmup K] [--repeats R] [--set k=v] [--json] [--trace-dir DIR]
// partune validate --search JOB [--candidates K]: search --execute K, judged on the ranking
// targets (search_execute.hpp).
// The predicted-vs-measured loop: each job is simulated (per-layer programs, every rank,
// on the job's instance type, with the model the backend runs) and run on the LibTorch
// backend (build/partune-run; backend_run.hpp), compared by sim/validation.hpp and
// printed (validate_report.hpp).
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend_process.hpp"
#include "backend_run.hpp"
#include "chrome_trace.hpp"
#include "commands.hpp"
#include "option_checks.hpp"
#include "job_suite.hpp"
#include "progress.hpp"
#include "search_execute.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"
#include "validate_report.hpp"

namespace partune::cli {

namespace fs = std::filesystem;

namespace {

struct ValidateOptions {
  std::string job, suite, trace_dir, jobs, search;
  std::string device = "cpu";
  int candidates = 5;
  std::vector<std::string> overrides;
  int steps = 8, warmup = 3, repeats = 3;
  bool json = false;
};

// One job of the run: its file, the job as loaded and the job as the backend runs it.
struct JobCase {
  std::string file;
  Job job;
  backend::BackendModelConfig model;
  Job ran;
};

// A job's prediction: its per-layer programs and their simulation (every rank, no
// symmetry: the per-rank peaks are compared), made once for all its runs.
struct Prediction {
  std::vector<RankProgram> programs;
  sim::SimResult result;
};

Prediction predict(const JobCase& c) {
  Prediction p;
  p.programs = build_programs(c.ran, ProgramOptions{Granularity::layer});
  sim::SimOptions so;
  so.use_symmetry = false;
  so.record_events = true;
  so.granularity = Granularity::layer;
  p.result = sim::simulate(c.ran, so);
  return p;
}

// Every run of one job: its comparisons, and what the backend said of itself.
struct JobRuns {
  std::optional<Prediction> prediction;
  std::vector<sim::Comparison> runs;
  int threads_per_rank = 0;
  std::string error;  // set when the job failed (the first failure ends it)
};

void run_once(const JobCase& c, const ValidateOptions& opt, JobRuns& j) {
  if (!j.prediction) j.prediction = predict(c);
  const BackendRun run = run_on_backend({c.file, opt.overrides, opt.steps, c.ran.world_size(), c.model, opt.device});
  j.runs.push_back(sim::compare_with_measurement(c.ran, j.prediction->programs, j.prediction->result, run.measured,
                                                 opt.warmup));
  j.threads_per_rank = run.report.value("threads_per_rank", 0);
}

// The job's result object of --json (text is made from it), with its traces written.
nlohmann::json job_result(const JobCase& c, const ValidateOptions& opt, const JobRuns& j, const sim::Comparison& cmp) {
  nlohmann::json out =
      comparison_json({c.job.name, c.file, backend::describe(c.model), j.threads_per_rank}, c.ran, cmp);
  if (!opt.trace_dir.empty()) {
    const std::string pfile = opt.trace_dir + "/" + c.job.name + "-predicted.json";
    const std::string mfile = opt.trace_dir + "/" + c.job.name + "-measured.json";
    write_chrome_trace(pfile, j.prediction->result.events, c.ran.cluster.instance.gpus_per_node);
    // The timed step whose time is the median stands for the run.
    write_chrome_trace(mfile, cmp.median_step_events, c.ran.cluster.instance.gpus_per_node);
    out["traces"] = {{"predicted", pfile}, {"measured", mfile}, {"measured_step", cmp.median_step + 1}};
  }
  return out;
}

// Ranks (times their threads) that outnumber this machine's cores (on the CPU).
bool oversubscribed(const JobCase& c, int threads_per_rank, const std::string& device) {
  if (device != "cpu") return false;
  const unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 && static_cast<unsigned>(c.ran.world_size() * std::max(1, threads_per_rank)) > cores;
}

// Every file loaded and checked first: a typo in the 20th job stops the suite at once,
// naming file, key and reason (ScenarioError, exit 2).
std::vector<JobCase> load_cases(const ValidateOptions& opt) {
  std::vector<JobCase> cases;
  for (const std::string& f : opt.suite.empty() ? std::vector<std::string>{opt.job} : suite_files(opt.suite, opt.jobs)) {
    JobCase c;
    c.file = f;
    c.job = load_job(f, opt.overrides);
    try {
      backend::ScaleOptions whole;
      whole.whole = opt.device == "cuda";  // partune run --device cuda keeps the job's model
      c.model = backend::scaled_model(c.job, whole);
    } catch (const std::invalid_argument& e) {
      throw ScenarioError(f, "model", e.what());
    }
    c.ran = backend::scaled_job(c.job, c.model);
    cases.push_back(std::move(c));
  }
  return cases;
}

// validate --search: the search's ranking against the backend's; exit 1 on a missed target.
void validate_search(const ValidateOptions& opt) {
  ExecuteOptions eo;
  eo.candidates = opt.candidates;
  eo.repeats = opt.repeats;
  eo.steps = opt.steps;
  eo.warmup = opt.warmup;
  const nlohmann::json execution = search_and_execute(opt.search, opt.overrides, eo, opt.json);
  const std::string missed = missed_ranking_targets(execution);
  if (missed.empty()) return;
  std::cerr << "partune: validate: missed the targets: " << missed << "\n";
  throw Exit{1};
}

}  // namespace

void register_validate(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "validate", "Predicted vs measured: simulate each job and run it on the LibTorch backend, then compare");
  auto opt = std::make_shared<ValidateOptions>();
  cmd->add_option("job", opt->job, "job file (YAML)");
  cmd->add_option("--suite", opt->suite, "every *.yaml job in this directory, sorted by name");
  cmd->add_option("--jobs", opt->jobs, "with --suite: only these job files (names without .yaml, comma-separated)");
  cmd->add_option("--steps", opt->steps, "backend steps per job, warm-up included")->capture_default_str()->check(count_in(1, 1000000));
  cmd->add_option("--warmup", opt->warmup, "first steps left out of the measurement")->capture_default_str()->check(count_in(0, 1000000));
  cmd->add_option("--repeats", opt->repeats,
                  "runs of each job, interleaved with the other jobs (A B C A B C); the step time is the "
                  "20th percentile of every timed step, with a bootstrap interval and the job's noise floor")
      ->capture_default_str()
      ->check(count_in(1, 1000));
  cmd->add_option("--search", opt->search,
                  "search this job, run the top K candidates and K from the rest of the ranking on the backend "
                  "(search --execute K), and judge the ranking: Kendall's tau >= 0.8, regret <= 5%");
  cmd->add_option("--candidates", opt->candidates, "with --search: K")->capture_default_str()->check(count_in(1, 1000));
  cmd->add_option("--set", opt->overrides, "override a key of every job, e.g. --set optimizer=sgd");
  cmd->add_option("--device", opt->device,
                  "where the backend runs the jobs: cpu (scaled model, fp32) or cuda (the job's model in its precision)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--trace-dir", opt->trace_dir, "write DIR/<job>-predicted.json and DIR/<job>-measured.json (Chrome traces)");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] {
    if (opt->job.empty() + opt->suite.empty() + opt->search.empty() != 2) {
      std::cerr << "partune: error: validate takes one job file, --suite DIR or --search JOB\n";
      throw Exit{2};
    }
    if (!opt->jobs.empty() && opt->suite.empty()) {
      std::cerr << "partune: error: --jobs selects jobs of a --suite\n";
      throw Exit{2};
    }
    if (opt->warmup >= opt->steps) {
      std::cerr << fmt::format("partune: error: --steps {} leaves no step after --warmup {}\n", opt->steps, opt->warmup);
      throw Exit{2};
    }
    if (::access(runner_path().c_str(), X_OK) != 0) {
      std::cerr << "partune: error: validate needs the LibTorch backend (build/partune-run), and this build has none\n";
      throw Exit{2};
    }
    if (!opt->search.empty()) return validate_search(*opt);
    const std::vector<JobCase> cases = load_cases(*opt);
    std::error_code ec;  // the trace folder is made before any job runs
    if (!opt->trace_dir.empty() && !fs::create_directories(opt->trace_dir, ec) && ec)
      throw OutputError(opt->trace_dir, "cannot create the folder: " + ec.message(), true);
    // Interleaved: round r runs every job once (A B C A B C), so slow periods of the
    // machine fall on every job alike.
    std::vector<JobRuns> runs(cases.size());
    const bool bar = ::isatty(STDERR_FILENO) != 0;
    for (int r = 0; r < opt->repeats; ++r)
      for (std::size_t i = 0; i < cases.size(); ++i) {
        if (bar) progress_bar(static_cast<long>(r * cases.size() + i), static_cast<long>(opt->repeats * cases.size()), "runs");
        if (!runs[i].error.empty()) continue;
        try {
          run_once(cases[i], *opt, runs[i]);
        } catch (const std::exception& e) {
          runs[i].error = e.what();
          std::cerr << fmt::format("partune: error: {}: {}\n", cases[i].file, e.what());
        }
      }
    if (bar) std::cerr << "\r\033[K" << std::flush;
    nlohmann::json results = nlohmann::json::array();
    std::vector<std::optional<sim::Comparison>> compared;
    std::vector<sim::SuiteOutcome> outcomes;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const JobCase& c = cases[i];
      nlohmann::json r;
      if (runs[i].error.empty()) {
        compared.emplace_back(sim::pool_runs(runs[i].runs));
        r = job_result(c, *opt, runs[i], *compared.back());
      } else {
        compared.emplace_back();
        r = failure_json(c.job.name, c.file, runs[i].error);
      }
      const bool over = oversubscribed(c, runs[i].threads_per_rank, opt->device);
      r["oversubscribed"] = over;
      results.push_back(r);
      if (!opt->json) std::cout << job_text(r) << "\n" << std::flush;
      outcomes.push_back({c.job.name, nullptr, over});
    }
    for (std::size_t i = 0; i < cases.size(); ++i) outcomes[i].comparison = compared[i] ? &*compared[i] : nullptr;
    const sim::SuiteSummary summary = sim::summarize(outcomes);
    const nlohmann::json s = summary_json(summary);
    if (opt->json) std::cout << nlohmann::json({{"jobs", results}, {"summary", s}}).dump(2) << "\n";
    else std::cout << summary_text(results, s);
    // Exit status 1 when a job failed or the suite missed a target it printed.
    const std::string missed = missed_targets(summary);
    if (!missed.empty()) std::cerr << "partune: validate: missed the targets: " << missed << "\n";
    if (summary.failed > 0 || !missed.empty()) throw Exit{1};
  });
}

}  // namespace partune::cli
