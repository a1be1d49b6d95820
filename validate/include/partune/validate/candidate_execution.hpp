#pragma once
// `partune search --execute K`: the top K candidates of a search and K drawn from the rest
// of the ranked list (search/execution_sample.hpp) run on the LibTorch backend, repeated
// and interleaved (A B C A B C), and the measured ranking compared with the predicted one
// (ranking.hpp). The backend is a separate process (backend_run.hpp).
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/search/tuner.hpp"
#include "partune/validate/ranking.hpp"
#include "partune/validate/step_statistics.hpp"

namespace partune::validate {

struct ExecutionOptions {
  int candidates = 0;  // K
  int repeats = 2, steps = 6, warmup = 2;
  // Before each backend run (done runs of total); once more with done == total when the
  // runs are over. Empty: none.
  std::function<void(long done, long total)> progress;
};

// One candidate as the backend ran it: the model its scaling rule gives, and the
// simulated step of exactly that job.
struct ExecutedCandidate {
  std::size_t search_rank = 0;  // 0-based place in the search's ranking
  Job job;                      // the search's candidate
  std::string configuration;    // its name in the search (Candidate::configuration)
  Job ran;                      // as the backend runs it (scaled_job)
  double predicted_step_s = 0;
  StepStatistics measured;      // of its timed steps, when it ran
  std::string error;            // set when a run failed (the first failure ends it)
};

struct Execution {
  int repeats = 0, steps = 0, warmup = 0;
  std::vector<ExecutedCandidate> candidates;  // in the order they were drawn
  std::vector<std::size_t> ran;               // indices into candidates: those that ran
  // Predicted against measured throughput (sequences per second) over `ran`; its
  // indices count in `ran`.
  RankAgreement agreement;
};

// Throws std::runtime_error when fewer than two candidates ran.
Execution execute_candidates(const search::SearchReport& report, const ExecutionOptions& opt);

}  // namespace partune::validate
