// Time-to-train and cost on demand and on spot capacity (training_cost.hpp).
#include "partune/costmodel/training_cost.hpp"

#include <limits>

#include "partune/costmodel/goodput.hpp"

namespace partune {

namespace {
constexpr double kHoursPerMonth = 730.0;  // 365 x 24 / 12
double given_or(double given, double instance) { return given >= 0 ? given : instance; }
}  // namespace

TrainingCost training_cost(const Job& job, double step_time, const TrainingCostOptions& o) {
  TrainingCost c;
  const double tokens_per_step = static_cast<double>(job.training.global_batch) * job.model.seq_len;
  if (o.tokens <= 0 || tokens_per_step <= 0) return c;
  const InstancePrice& price = job.cluster.instance.price;
  const double nodes = job.cluster.nodes;
  c.steps = o.tokens / tokens_per_step;
  c.seconds = c.steps * step_time;
  c.on_demand_usd = c.seconds / 3600.0 * nodes * given_or(o.on_demand_per_hour, price.on_demand_per_hour);
  const Goodput g = goodput(resilience(job));
  c.goodput = g.fraction;
  c.checkpoint_interval = g.interval;
  c.failure_seconds = g.fraction > 0 ? c.seconds / g.fraction : std::numeric_limits<double>::infinity();
  c.failure_usd = g.fraction > 0 ? c.on_demand_usd / g.fraction : std::numeric_limits<double>::infinity();
  const double spot = given_or(o.spot_per_hour, price.spot_per_hour);
  const double per_month = given_or(o.interruptions_per_month, price.spot_interruptions_per_month);
  c.has_spot = spot > 0 && per_month >= 0;
  if (!c.has_spot) return c;
  c.spot_interruptions_per_hour = nodes * per_month / kHoursPerMonth;
  const double lost = c.spot_interruptions_per_hour * (o.checkpoint_interval_h / 2.0 + o.restart_h);
  c.spot_seconds = lost < 1.0 ? c.seconds / (1.0 - lost) : std::numeric_limits<double>::infinity();
  c.spot_usd = c.spot_seconds / 3600.0 * nodes * spot;
  return c;
}

}  // namespace partune
