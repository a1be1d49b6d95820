#pragma once
// The discrete-event simulator: every rank runs its per-rank program (costmodel's
// program.hpp) as SimGrid actors on a platform built from the job's cluster, so link
// sharing, waiting and overlap emerge from the simulation rather than from formulas.
#include <string>
#include <vector>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program.hpp"

namespace partune::sim {

struct SimOptions {
  // Simulate one data-parallel replica when replicas are provably identical (they sit on
  // disjoint nodes and run the same program; data-parallel traffic then loads each
  // node's NICs exactly as its mirror image does). Off: every rank is simulated.
  bool use_symmetry = true;
  bool record_events = false;   // keep every instruction's interval (for --trace)
  Granularity granularity = Granularity::chunk;
};

// One executed instruction, named as the backend names it (to_string(OpKind)).
struct TraceEvent {
  int rank = 0;
  int stream = 0;           // 0 compute, 1 pipeline/copies, 2+ one per communicator
  OpKind kind = OpKind::forward;
  CommGroup group = CommGroup::none;
  int microbatch = -1, chunk = 0, layer = -1;
  double start = 0, end = 0;  // simulated seconds
};

// Time a rank's program spent blocked on communication, by what it waited for.
struct ExposedComm {
  double tensor = 0;    // tensor-parallel all-reduces
  double pipeline = 0;  // waiting for activations/gradients (bubble and transfers)
  double data = 0;      // gradient synchronisation
  double sharded = 0;   // sharded all-gather / reduce-scatter
  double offload = 0;   // activation reload/offload
};

struct RankResult {
  int rank = 0;
  int stage = 0;
  double end_time = 0;
  double compute_busy = 0;
  ExposedComm exposed;
  double peak_memory = 0;   // bytes, tracked over the timeline
};

struct SimResult {
  Estimate metrics;                  // same headline numbers and JSON keys as `estimate`
  std::vector<double> stage_utilisation;  // compute busy / step time, per pipeline stage
  double bubble_fraction = 0;        // 1 - compute busy / step time, mean over ranks
  ExposedComm exposed;               // of the critical rank (the one that finishes last)
  std::vector<RankResult> ranks;     // simulated ranks
  std::vector<TraceEvent> events;    // when record_events
  bool symmetric = false;            // one replica stood for all
  long activities = 0;               // simulated executions + communications + waits
  double wall_seconds = 0;           // host time spent simulating
};

// Runs the simulation in a child process (SimGrid allows one engine per process), so it
// can be called any number of times. Throws std::runtime_error if the child fails.
SimResult simulate(const Job& job, const SimOptions& options = {});

// Whether use_symmetry can apply to this job (and why not, when it cannot).
bool replicas_are_symmetric(const Job& job, std::string* why_not = nullptr);

}  // namespace partune::sim
