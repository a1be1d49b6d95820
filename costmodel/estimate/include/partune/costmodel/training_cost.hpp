#pragma once
// Time-to-train and cost of a token budget at a predicted step time, on demand and on
// spot capacity (partune sweep). Spot nodes are interrupted: any node's interruption
// stops the job, which restarts from its last checkpoint. With interruptions arriving at
// rate L per hour of running (nodes x the share of nodes interrupted a month / 730 h),
// each costs on average half a checkpoint interval of lost work plus the restart (Young
// 1974's first-order model, without the checkpoints' own time), so an hour of progress
// takes 1 / (1 - L (interval / 2 + restart)) hours; never, when that is not positive.
#include "partune/costmodel/job.hpp"

namespace partune {

struct TrainingCostOptions {
  double tokens = 0;                 // the budget
  double checkpoint_interval_h = 1;  // hours between checkpoints
  double restart_h = 0.25;           // hours to get going again after an interruption
  double on_demand_per_hour = -1;    // USD per node-hour; < 0: the instance type's price
  double spot_per_hour = -1;         // < 0: the instance type's
  double interruptions_per_month = -1;  // share of nodes a month; < 0: the instance type's
};

struct TrainingCost {
  double steps = 0;
  double seconds = 0;                  // on demand
  double on_demand_usd = 0;            // 0 when no price is known
  bool has_spot = false;               // a spot price and an interruption rate are known
  double spot_interruptions_per_hour = 0;  // the job's (any node)
  double spot_seconds = 0;             // with the expected restarts; infinity: never ends
  double spot_usd = 0;
  // On demand with the hardware's failures (goodput.hpp: checkpoints every Daly interval,
  // restarts, restores and lost work): seconds / goodput; equal to `seconds` when the
  // instance type models no failures.
  double goodput = 1;
  double checkpoint_interval = 0;      // seconds of work between checkpoints (infinity: none needed)
  double failure_seconds = 0;          // infinity: failures outpace progress
  double failure_usd = 0;
};

TrainingCost training_cost(const Job& job, double step_time, const TrainingCostOptions& options);

}  // namespace partune
