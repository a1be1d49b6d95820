#pragma once
// The autotuner: enumerate the space, prune what cannot fit (recording why) and what is
// clearly dominated, rank the rest with the analytical estimator, then re-evaluate the
// best K with the discrete-event simulator in worker processes; the answer is the
// simulator's best among those that fit by the simulator's own memory verdict. A failed
// simulation rules out its candidate alone.
#include <functional>
#include <string>
#include <vector>

#include "partune/costmodel/estimator.hpp"
#include "partune/search/space.hpp"
#include "partune/sim/simulator.hpp"

namespace partune::search {

struct Candidate {
  Job job;
  std::string configuration; // describe(job), set once run_search has its final job
  Estimate estimate;         // the estimator's view
  bool simulated = false;
  StepMetrics simulation;    // the simulator's view (when simulated)
  // Why the simulator rules the candidate out: its simulation failed (simulated stays
  // false), or its peak memory over the simulated timeline does not fit. Empty otherwise.
  std::string rejection;
  // Why a candidate due for the simulator kept the estimator's figures instead: its
  // simulation would hold more than SearchOptions::simulation_budget. Empty otherwise.
  std::string beyond_budget;
  // Judged in tier 2: simulated, or beyond the budget and so judged by the estimator.
  bool judged() const { return simulated || !beyond_budget.empty(); }
  double score() const { return simulated ? simulation.step_time : estimate.step_time; }
};

// A candidate dropped before simulation, kept compact (the space can be millions of
// points); explain() turns it into words.
struct Pruned {
  Point point;
  enum class Stage : char { memory, dominated } stage = Stage::memory;
  double peak_bytes = 0;     // estimated peak memory
  double step_time = 0;      // estimated step time (dominated ones)
  double better_step = 0;    // dominated: the step time of a candidate that beats it
  double better_bytes = 0;   //            and that candidate's peak memory
};

struct SearchOptions {
  int top_k = 32;             // candidates re-evaluated by the simulator
  int workers = 0;            // simulations at once, and threads estimating; 0 = one per core
  bool simulate = true;       // false: estimator only
  double dominance_margin = 0.10;  // pruned if another is this much faster and no larger
  // Automated partitioning of the best candidates' layers into stages (SMP's
  // auto-partition): kept when the estimator says the split is faster and still fits.
  bool auto_partition = true;
  // Also simulate the best tensor-across-nodes and pipeline-across-nodes candidates
  // (otherwise they carry the estimator's numbers).
  bool simulate_contrasts = false;
  // The most instructions (the simulated ranks' programs, after folding identical
  // replicas: sim::planned_simulation_size) one candidate's simulation may hold. A larger
  // one keeps the estimator's figures (Candidate::beyond_budget) and is ranked by them:
  // tier 2 then takes seconds a candidate, not minutes. Measured on the 2-core VM
  // (docs/performance.md §2): 0.79M instructions took 4.7 s, 1.57M 12.6 s.
  double simulation_budget = 1e6;
  double memory_weight = 0.5;     // 0 balances time only, 1 memory only
  // Share of the GPU's HBM a configuration must leave free, by the estimator's peak and by
  // the simulator's: what the model does not see (the allocator's fragmentation, a longer
  // batch, a library's workspace) needs room on a real launch. 0 accepts a peak at the HBM.
  double memory_headroom = 0.10;
  // Slow GPUs the candidates are simulated with (simulate --slow): the ranking under a
  // straggler model. Every rank is then simulated (no symmetry): slower searches.
  std::vector<sim::Slowdown> slowdowns;
  // For tests only: runs in each simulation's child process before it simulates (see
  // sim::SimOptions::in_child), so a test can make a candidate's simulation fail.
  std::function<void(const Job&)> in_simulation_child;
  // Called as work advances: (done, total, what).
  std::function<void(long, long, const char*)> progress;
  // Runs a batch of simulations, every outcome in order (default: sim::simulate_each over
  // `workers` processes here). A front end may split the batch over machines (search
  // under MPI), as long as every caller gets every outcome.
  using SimulateBatch = std::function<std::vector<sim::SimOutcome>(
      const std::vector<Job>&, const sim::SimOptions&, int, const std::function<void(std::size_t)>&)>;
  SimulateBatch simulate_batch;
};

struct SearchReport {
  std::vector<Candidate> ranked;   // best first: the judged candidates (simulated and fitting
                                   // by the simulator, or beyond the simulation budget) by
                                   // their step, then the next survivors by estimated step
                                   // (at most 4 K in all, less the rejected)
  // Candidates the simulator ruled out (Candidate::rejection says why), in estimator order.
  // When none of the top K fits by the simulator, the next K are simulated, and so on.
  std::vector<Candidate> rejected;
  std::vector<Pruned> pruned;
  // The best candidate (by the estimator, then simulated) whose tensor-parallel groups
  // span nodes, and the best whose pipeline spans nodes with tensor parallelism inside
  // nodes: the choice the Latent Space case is about. `has_*` false when none fits.
  bool has_tensor_across_nodes = false, has_pipeline_across_nodes = false;
  Candidate best_tensor_across_nodes, best_pipeline_across_nodes;
  long enumerated = 0, invalid = 0, duplicates = 0;
  long pruned_memory = 0, pruned_dominated = 0;
  long estimated = 0, simulated = 0;  // simulated: ranked candidates sent to the simulator
  long simulation_failures = 0, simulated_too_large = 0;
  long beyond_budget = 0;          // of `simulated`, those beyond the budget (kept their estimate)
  long partitioned = 0;            // candidates whose stages the partitioner re-split
  double memory_limit = 0;         // bytes a candidate may peak at: HBM less the headroom
  double memory_headroom = 0;      // SearchOptions::memory_headroom, for the reports
  double enumerate_seconds = 0, estimate_seconds = 0, simulate_seconds = 0;
};

SearchReport run_search(const Job& base, const SearchSpace& space, const SearchOptions& options);

// Why the pruned candidates matching `filters` ("key=value[,value]", as --fix) were
// dropped, one line each (at most `limit` lines).
std::vector<std::string> explain(const SearchReport& report, const Job& base, const std::vector<std::string>& filters,
                                 std::size_t limit = 20);

}  // namespace partune::search
