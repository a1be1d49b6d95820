#include "partune/costmodel/sharding.hpp"

#include <algorithm>
#include <cmath>


namespace partune {

ShardingSettings sharding_settings(const ParallelConfig& pc) {
  const ShardingConfig& c = pc.sharding;
  ShardingSettings s;
  s.flavor = pc.sharding_flavor;
  switch (s.flavor) {
    case ShardingFlavor::smp:
      s.prefetch_bucket_size = 5e7;
      s.reduce_bucket_size = 5e8;
      s.param_persistence_threshold = 1e6;
      s.hierarchical_allgather = true;
      break;
    case ShardingFlavor::zero3:
      s.prefetch_bucket_size = 5e7;
      s.reduce_bucket_size = 5e8;
      s.param_persistence_threshold = 1e5;
      break;
    case ShardingFlavor::fsdp: break;  // one flat parameter per layer, nothing persists
  }
  const bool deepspeed = s.flavor != ShardingFlavor::fsdp;
  if (deepspeed && c.prefetch_bucket_size >= 0) s.prefetch_bucket_size = c.prefetch_bucket_size;
  if (deepspeed && c.reduce_bucket_size >= 0) s.reduce_bucket_size = c.reduce_bucket_size;
  if (deepspeed && c.param_persistence_threshold >= 0) s.param_persistence_threshold = c.param_persistence_threshold;
  if (c.hierarchical_allgather >= 0) s.hierarchical_allgather = c.hierarchical_allgather == 1;
  s.backward_prefetch = c.backward_prefetch;
  return s;
}

ShardingPlan sharding_plan(const Job& job, const LayerPlan& layer) {
  ShardingPlan plan;
  plan.settings = sharding_settings(job.parallel);
  const double params = layer.params();
  if (plan.settings.flavor == ShardingFlavor::fsdp) {
    plan.units = {params};
    plan.gathered = params;
    plan.reduce_calls = 1;
    plan.reduce_elements = params;
    plan.backward_prefetch = plan.settings.backward_prefetch != BackwardPrefetch::none;
    plan.backward_prefetch_before_compute = plan.settings.backward_prefetch == BackwardPrefetch::pre;
    return plan;
  }
  for (const PlanOp& op : layer.ops) {
    if (op.params <= 0) continue;
    if (op.params < plan.settings.param_persistence_threshold) {
      plan.persistent += op.params;
    } else {
      plan.units.push_back(op.params);
      plan.gathered += op.params;
    }
  }
  plan.reduce_calls = std::max(1, static_cast<int>(std::ceil(params / plan.settings.reduce_bucket_size)));
  plan.reduce_elements = params / plan.reduce_calls;
  return plan;
}

double ShardingPlan::live_gathered() const {
  double peak = 0;
  const int n = static_cast<int>(units.size());
  for (int i = 0; i < n; ++i) {
    // Unit i in use (twice over a layer boundary: the next layer's units follow).
    double ahead = 0;
    for (int j = 1; j <= n; ++j) {
      const double next = units[(i + j) % n];
      if (j > 1 && ahead + next > settings.prefetch_bucket_size) break;
      ahead += next;
    }
    peak = std::max(peak, units[i] + ahead);
  }
  return peak;
}

}  // namespace partune
