#pragma once
// `partune bench run`: the backend's data-parallel overhead. A data-parallel world of N
// ranks (`partune run --nproc N`) against N independent one-rank runs of the same
// per-rank work (1/N of the batch each, all N at once, the same threads per rank): the
// world's samples/s over the sum of theirs. Target: at least 90% for a world of 2 on a
// 2-core machine. Each run is a build/partune-run process read through its --json
// report (launch/backend_process.hpp).
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partune/costmodel/job.hpp"

namespace partune::validate {

struct OverheadOptions {
  std::string job_file;
  std::vector<std::string> overrides;  // --set, on every run
  int steps = 8, warmup = 2, rounds = 3;
  int layers = 4, hidden = 256, heads = 4, seq = 128, vocab = 256;  // the model run
};

// What keeps `job` from being measured ("" when nothing): a data-parallel world of 2 or
// more ranks (pipeline, tensor and sharded degree 1) whose batch splits over its ranks.
std::string why_not_data_parallel(const Job& job, const std::string& file);

// The ranks, and the threads each run gets: the cores shared among the N ranks.
struct OverheadPlan {
  int ranks = 0, threads = 0;
  std::string world_command, alone_command;  // shell commands of partune-run
};
OverheadPlan plan_overhead(const Job& job, const OverheadOptions& opt);

// One round: the N runs alone (at once), then the world. Samples/s of a run: that of its
// 20th-percentile step time after the warm-up (costmodel/quantile.hpp).
struct OverheadRound {
  std::vector<double> alone;   // each run's samples/s
  double alone_sum = 0, slowest_alone = 0, world = 0;
};

struct DataParallelOverhead {
  std::vector<OverheadRound> rounds;
  double alone_sum = 0, world = 0;  // medians over the rounds
  double efficiency_pct = 0;        // 100 world / alone_sum
  // Each round's own efficiency: their spread says how much one round can be trusted.
  double lowest_round_pct = 0, highest_round_pct = 0;
  // Data parallelism is synchronous: each step waits for the slowest replica. When the
  // cores do not deliver the same speed (a shared VM), even free communication gives N x
  // the slowest alone (median over the rounds); against that bound the rest is the
  // backend's own overhead.
  double lockstep_bound = 0;
  nlohmann::json model;  // the model the runs ran (partune-run's report)
};

// --rounds rounds, alternating so that a slow spell of a shared machine hits both sides
// alike; `on_round` sees each round as it ends. Throws std::runtime_error when a run fails
// or has no step after the warm-up.
DataParallelOverhead measure_overhead(const OverheadPlan& plan, const OverheadOptions& opt,
                                      const std::function<void(int round, const OverheadRound&)>& on_round);

}  // namespace partune::validate
