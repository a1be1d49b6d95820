// Candidates of a search run on the backend (candidate_execution.hpp).
#include "partune/validate/candidate_execution.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "partune/costmodel/scaled_job.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/search/execution_sample.hpp"
#include "partune/sim/simulator.hpp"
#include "partune/validate/backend_run.hpp"

namespace partune::validate {

namespace {

namespace fs = std::filesystem;

// A candidate being run: its job file in the scratch folder and each run's timed steps.
struct Candidate {
  ExecutedCandidate executed;
  std::string file;
  std::vector<std::vector<double>> timed;  // per run
};

Candidate prepare(const search::Candidate& c, std::size_t rank, const fs::path& dir) {
  Candidate e;
  e.executed.search_rank = rank;
  e.executed.job = c.job;
  e.executed.configuration = c.configuration;
  e.executed.ran = scaled_job(c.job, ScaleOptions{});
  e.file = (dir / fmt::format("candidate-{}.yaml", rank + 1)).string();
  std::ofstream(e.file) << job_yaml(e.executed.ran, "partune search --execute: candidate " + std::to_string(rank + 1));
  e.executed.predicted_step_s = sim::simulate(e.executed.ran, sim::SimOptions{}).metrics.step_time;
  return e;
}

void run_once(Candidate& e, const ExecutionOptions& opt) {
  const BackendRun run = run_on_backend({e.file, {}, opt.steps, e.executed.ran.world_size(), e.executed.ran.model});
  const auto& s = run.measured.step_seconds;
  e.timed.emplace_back(s.begin() + std::min<std::ptrdiff_t>(opt.warmup, static_cast<std::ptrdiff_t>(s.size())), s.end());
  if (e.timed.back().empty()) throw std::runtime_error("no step after the warm-up");
}

// Removes the scratch folder of candidate job files.
struct ScratchFolder {
  fs::path path;
  ScratchFolder() {
    char name[] = "/tmp/partune-execute-XXXXXX";
    if (!::mkdtemp(name)) throw std::runtime_error("cannot create a temporary directory");
    path = name;
  }
  ~ScratchFolder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Sequences per second, predicted and measured (the low quantile of the timed steps),
// of the candidates that ran.
RankAgreement agreement(const Execution& x) {
  std::vector<double> predicted, measured;
  for (std::size_t i : x.ran) {
    const ExecutedCandidate& e = x.candidates[i];
    const double sequences = e.ran.training.global_batch;
    predicted.push_back(sequences / e.predicted_step_s);
    measured.push_back(sequences / e.measured.low);
  }
  return rank_agreement(predicted, measured);
}

}  // namespace

Execution execute_candidates(const search::SearchReport& report, const ExecutionOptions& opt) {
  ScratchFolder scratch;
  std::vector<Candidate> candidates;
  for (std::size_t i : search::execution_sample(report.ranked.size(), static_cast<std::size_t>(opt.candidates)))
    candidates.push_back(prepare(report.ranked[i], i, scratch.path));
  // Interleaved: each round runs every candidate once.
  const long total = static_cast<long>(opt.repeats * candidates.size());
  long done = 0;
  for (int r = 0; r < opt.repeats; ++r)
    for (Candidate& e : candidates) {
      if (opt.progress) opt.progress(done++, total);
      if (!e.executed.error.empty()) continue;
      try {
        run_once(e, opt);
      } catch (const std::exception& ex) {
        e.executed.error = ex.what();
      }
    }
  if (opt.progress) opt.progress(total, total);
  Execution x;
  x.repeats = opt.repeats;
  x.steps = opt.steps;
  x.warmup = opt.warmup;
  for (Candidate& e : candidates) {
    if (e.executed.error.empty()) {
      e.executed.measured = step_statistics(e.timed);
      x.ran.push_back(x.candidates.size());
    }
    x.candidates.push_back(std::move(e.executed));
  }
  if (x.ran.size() < 2)
    throw std::runtime_error(fmt::format("--execute: {} of {} candidates ran on the backend; a ranking needs two",
                                         x.ran.size(), x.candidates.size()));
  x.agreement = agreement(x);
  return x;
}

}  // namespace partune::validate
