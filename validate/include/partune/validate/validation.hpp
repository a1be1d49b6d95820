#pragma once
// Predicted vs measured (`partune validate`): the simulator's step of a job against the
// LibTorch backend's run of the same per-rank programs. Pure functions over the two
// timelines (both the contract's TraceEvent); validation_suite.hpp runs the simulator and
// the backend, the command prints.
//
// "Time of an instruction kind" is the time a rank's program spends on instructions of
// that kind in one step: a synchronous instruction from issue to completion (for compute,
// including any slow-down; for a receive, the time waiting for the peer), an asynchronous
// one from its issue plus the time the program is blocked at its `wait`. Summed over the
// step on each rank, then averaged over every rank of the world (a rank that never runs
// the kind counts 0), so the per-kind times add up to about one step of one rank.
#include <map>
#include <string>
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/sim/simulator.hpp"
#include "partune/validate/step_statistics.hpp"

namespace partune::validate {

using KindTimes = std::map<OpKind, double>;

// The simulator's side, from its recorded events (stream 0: synchronous instructions;
// stream 1: waits on sends and copies) and the programs it ran. The simulator records
// no event for a wait on an asynchronous collective: the gap on the program's timeline
// before the next recorded event is that wait, and is booked to the awaited
// collective's kind (to the last awaited one when several waits follow each other).
KindTimes predicted_kind_times(const std::vector<RankProgram>& programs, const sim::SimResult& result);

// The backend's side: each rank's events in program order, one per instruction, `steps`
// times over. Throws std::runtime_error when the events do not follow the programs.
struct MeasuredSteps {
  std::vector<KindTimes> kind_times;           // per step, averaged over ranks
  std::vector<std::vector<TraceEvent>> events;  // per step, every rank, named as the simulator
                                               // names them (a wait becomes the awaited
                                               // instruction), each rank's step starting at 0
};
MeasuredSteps split_measured_steps(const std::vector<RankProgram>& programs, const std::vector<TraceEvent>& events,
                                   int steps);

// The event names (to_string(OpKind)) of a timeline, sorted, each once.
std::vector<std::string> event_kind_names(const std::vector<TraceEvent>& events);

// 100 (predicted - measured) / measured; NaN when nothing was measured.
double error_pct(double predicted, double measured);
// The median; NaN for no values.
double median(std::vector<double> values);

// What the backend reports of its run of a job.
struct MeasuredRun {
  std::vector<double> step_seconds;             // every step, warm-up included
  std::vector<std::vector<double>> peak_bytes;  // per step, per rank: tensor bytes
  std::vector<TraceEvent> events;               // its trace: every instruction of every step
};

struct KindComparison {
  OpKind kind = OpKind::forward;
  double predicted_s = 0, measured_s = 0, error_pct = 0;  // per rank, mean over ranks
};
struct MemoryComparison {
  int rank = 0, stage = 0;
  double predicted_bytes = 0, measured_bytes = 0, error_pct = 0;
};

// One job, predicted against measured over the steps after the warm-up.
struct Comparison {
  int steps_run = 0, warmup = 0;
  std::vector<double> timed_seconds;  // the steps after the warm-up (of every run, pooled)
  // measured: the low quantile of the timed steps (step_statistics.hpp); the error is on it.
  double predicted_step_s = 0, measured_step_s = 0, step_error_pct = 0;
  StepStatistics measured;     // the timed steps' statistics over every run
  bool within_noise = false;   // |step error| inside the job's noise floor
  std::vector<KindComparison> kinds;  // every kind either side has, in OpKind order
  std::vector<MemoryComparison> memory;  // every simulated rank
  // The simulator's peak includes the instance's reserved memory (runtime, allocator
  // slack); the backend counts tensor bytes only, so that constant is left out.
  double reserved_bytes_left_out = 0;
  std::vector<std::string> predicted_kinds, measured_kinds, missing_measured_kinds;
  int median_step = 0;  // 0-based: the timed step whose time is closest to the median
  std::vector<TraceEvent> median_step_events;  // that step's measured timeline (simulator's layout)
};

// `ran`: the job as the backend ran it; `programs`: its per-layer programs; `predicted`:
// its simulation (every rank, events recorded). Throws std::runtime_error when the
// measurement does not fit the job (world size, steps, events).
Comparison compare_with_measurement(const Job& ran, const std::vector<RankProgram>& programs,
                                    const sim::SimResult& predicted, const MeasuredRun& measured, int warmup);

// Several runs of the same job (interleaved with other jobs): one comparison whose step
// time is the statistics of every run's timed steps; kinds, memory and the median step's
// timeline are those of the run whose own low quantile is the median run's. Throws
// std::invalid_argument for no run.
Comparison pool_runs(const std::vector<Comparison>& runs);

// A suite of jobs: the errors over every job that ran. Jobs whose ranks outnumber the
// host's cores are oversubscribed (no real cluster runs so): they count for memory and
// correctness, and their step error is summarised apart from the targets'.
struct SuiteOutcome {
  std::string job;
  const Comparison* comparison = nullptr;  // null: the job failed
  bool oversubscribed = false;
};
struct SuiteSummary {
  int jobs = 0, failed = 0;
  int oversubscribed = 0, within_noise = 0;     // jobs that ran
  double oversubscribed_median_abs_step_error_pct = 0;  // NaN when none
  double median_abs_step_error_pct = 0;  // over jobs that fit the cores; NaN when none ran
  double worst_abs_step_error_pct = -1;  // < 0 when no job ran
  std::string worst_job;
  double median_abs_memory_error_pct = 0;  // over every rank of every job
};
SuiteSummary summarize(const std::vector<SuiteOutcome>& outcomes);

}  // namespace partune::validate
