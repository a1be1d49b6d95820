#pragma once
// The discrete-event simulator: every rank runs its per-rank program (costmodel's
// program.hpp) as SimGrid actors on a platform built from the job's cluster, so link
// sharing, waiting and overlap emerge from the simulation rather than from formulas.
#include <functional>
#include <string>
#include <vector>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/simulation_size.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"

namespace partune::sim {

// Slow GPUs (stragglers, issue 32): every kernel of the ranks named runs `factor` times
// as long. node: the node's every GPU; rank: one; jitter: every GPU, each by its own
// 1 + |z| x factor with z drawn from a normal distribution seeded by the rank (measured
// GEMM jitter as a distribution; the same job and options give the same draw).
struct Slowdown {
  enum class Scope { node, rank, jitter } scope = Scope::node;
  int index = 0;       // the node or the rank (unused for jitter)
  double factor = 1;   // node, rank: the slow-down (> 1); jitter: the standard deviation
};
// Parses "node=17:1.15", "rank=5:1.2" or "jitter=0.02"; std::invalid_argument naming the
// reason otherwise (and for an index outside the job, see slowdown_factors).
Slowdown parse_slowdown(const std::string& spec);
// Each rank's kernel-time factor under `slowdowns` (1 where none applies; the slow-downs
// multiply). std::invalid_argument when a node or rank is not in the job.
std::vector<double> slowdown_factors(const Job& job, const std::vector<Slowdown>& slowdowns);

struct SimOptions {
  // Simulate one block of data-parallel replicas when the blocks are provably identical:
  // the smallest leading block of replicas whose nodes hold no other replica, with each
  // data-parallel group's members inside it on one node (so every network successor is
  // outside the block, and a mirror of the sender loads the same links as the real
  // peer). One replica when replicas sit on disjoint nodes. Off: every rank is simulated.
  bool use_symmetry = true;
  bool record_events = false;   // keep every instruction's interval (for --trace)
  // Slow GPUs: ranks no longer identical, so every rank is simulated (no symmetry).
  std::vector<Slowdown> slowdowns;
  Granularity granularity = Granularity::chunk;
  // Time the collectives of a communicator that has its links to itself (inside one
  // NVLink level, nothing else crossing its members' NVSwitch ports) in closed form
  // instead of running their flows: the same times with far fewer simulated activities
  // (tests/sim/test_own_links.cpp). Off: every collective runs as flows.
  bool closed_form_collectives = true;
  // For tests only: runs in the simulation's child process before the simulation, so a
  // test can make a child fail (throw) or die (abort) the way a real one might.
  std::function<void(const Job&)> in_child;
};

// Simulated events are the contract's TraceEvent (program.hpp), in simulated seconds.
using TraceEvent = partune::TraceEvent;

// Time a rank's program spent blocked on communication, by what it waited for.
struct ExposedComm {
  double tensor = 0;    // the collectives inside the layers: the tensor group's, the context
                        // group's and the expert group's (tensor-parallel all-reduces, K/V
                        // exchange, token all-to-alls)
  double context = 0;   // of `tensor`, the context groups' (both sub-groups of a2a+p2p)
  double expert = 0;    // of `tensor`, the expert groups' all-to-alls
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
  StepMetrics metrics;               // the simulated step: the same figures and JSON keys as `estimate`
  // The estimator's figures for the same job, from the costs the simulation built (what
  // `partune simulate` prints beside its own, without estimating again).
  StepMetrics estimated;
  std::vector<double> stage_utilisation;  // compute busy / step time, per pipeline stage
  double bubble_fraction = 0;        // time neither compute nor an exposed tensor, data, sharded
                                     // or offload collective explains (waits on pipeline neighbours),
                                     // / step time, mean over ranks; 0 with one stage
  ExposedComm exposed;               // of the critical rank (the one that finishes last)
  std::vector<RankResult> ranks;     // simulated ranks
  std::vector<TraceEvent> events;    // when record_events
  bool symmetric = false;            // a block of replicas stood for all
  long activities = 0;               // simulated executions + communications + waits
  double wall_seconds = 0;           // host time spent simulating
  double peak_process_bytes = 0;     // the simulating process's peak resident memory
};

// Runs the simulation in a child process (SimGrid allows one engine per process), so it
// can be called any number of times. Throws std::runtime_error if the child fails.
SimResult simulate(const Job& job, const SimOptions& options = {});

// One simulation of simulate_each: its result, or why it has none.
struct SimOutcome {
  bool ok = false;
  SimResult result;
  std::string error;  // when !ok: the simulator's message, or how its process ended
};

// Simulates every job, each in its own child process, at most `workers` at once. The
// children are forked and waited for by the calling thread alone (poll on their pipes):
// no thread is started, and the calling process must run no other thread (fork copies
// only the calling thread, so a lock another thread held would stay held in the child):
// std::logic_error otherwise. A child dies with its parent (PR_SET_PDEATHSIG). A failed
// simulation is that job's outcome, never an exception. `on_done(done)` is called after
// each one ends.
std::vector<SimOutcome> simulate_each(const std::vector<Job>& jobs, const SimOptions& options, int workers,
                                      const std::function<void(std::size_t done)>& on_done = {});

// A simulation's outcome as bytes and back (the flat binary the child process writes):
// for front ends that simulate on other machines (partune search under MPI).
std::string encode_outcome(const SimOutcome& outcome);
SimOutcome decode_outcome(const std::string& bytes);

// Whether use_symmetry can apply to this job (and why not, when it cannot).
bool replicas_are_symmetric(const Job& job, std::string* why_not = nullptr);
// Whether one rank per tensor-parallel group can stand for the group (groups inside one
// node: the others run the same program and load their own links identically).
bool tensor_groups_are_symmetric(const Job& job);
// The number of replicas simulated under symmetry (0 when it cannot apply).
int replica_cluster_size(const Job& job, std::string* why_not = nullptr);
// How a simulation of `job` under `options` folds identical ranks (the one rule World and
// planned_simulation_size read): the block of replicas it simulates (0: every replica) and
// whether one rank stands for each tensor group. Nothing folds without use_symmetry, with
// slow GPUs, or where ranks share a node's cores.
struct Folding {
  int replica_block = 0;
  bool tensor = false;
};
Folding simulation_folding(const Job& job, const SimOptions& options);
// What a simulation of `job` under `options` will hold (simulation_size.hpp): the ranks the
// folding keeps (all of them without symmetry) and their programs' instructions.
SimulationSize planned_simulation_size(const Job& job, const SimOptions& options);

}  // namespace partune::sim
