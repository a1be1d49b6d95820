#pragma once
// Failures, checkpoints and goodput (issue 32): at scale a run is set by how often
// something fails and what a restart costs. The job fails at rate
//   lambda = GPUs x per-GPU rate + nodes x per-node rate   (the instance type's `failures:`),
// its checkpoint (every parameter's weights and optimizer states) is written and read at
// the nodes' shared-storage rate (`checkpoint_storage:`), and after a failure it restarts,
// restores the checkpoint and redoes the work since it. With checkpoints every tau seconds
// of work, each costing delta to write, the share of wall time that is progress is, to
// first order (Young 1974, Daly 2006),
//   goodput(tau) = tau / (tau + delta) x (1 - lambda (restart + restore + (tau + delta) / 2)),
// best near Daly's interval tau* = sqrt(2 delta M) - delta (M = 1 / lambda; tau* = M when
// delta >= 2 M), Young's sqrt(2 delta M) to first order.
#include "partune/costmodel/job.hpp"

namespace partune {

struct Resilience {
  double failures_per_second = 0;  // the job's lambda; 0: failures not modelled
  double checkpoint_bytes = 0;     // one checkpoint, every rank's part together
  double write_seconds = 0;        // delta
  double restore_seconds = 0;
  double restart_seconds = 0;
  double mtbf_seconds() const;     // M = 1 / lambda (infinity without failures)
};
Resilience resilience(const Job& job);

// Daly's optimal interval between checkpoints, seconds of work: sqrt(2 delta M) - delta,
// or M when delta >= 2 M; infinity without failures (M infinite).
double young_daly_interval(double checkpoint_seconds, double mtbf_seconds);

// The share of wall time that is progress at interval `tau` (0 when failures outpace it).
double goodput_at(const Resilience& r, double tau);

struct Goodput {
  double interval = 0;  // Daly's tau* (infinity without failures)
  double fraction = 1;  // goodput at tau*
};
Goodput goodput(const Resilience& r);

}  // namespace partune
