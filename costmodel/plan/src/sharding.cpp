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
    case ShardingFlavor::fsdp2: s.gather_copies = true; break;  // per-parameter DTensors, one unit per layer
  }
  const bool deepspeed = !layer_unit(s.flavor);
  if (deepspeed && c.prefetch_bucket_size >= 0) s.prefetch_bucket_size = c.prefetch_bucket_size;
  if (deepspeed && c.reduce_bucket_size >= 0) s.reduce_bucket_size = c.reduce_bucket_size;
  if (deepspeed && c.param_persistence_threshold >= 0) s.param_persistence_threshold = c.param_persistence_threshold;
  if (c.hierarchical_allgather >= 0) s.hierarchical_allgather = c.hierarchical_allgather == 1;
  s.backward_prefetch = c.backward_prefetch;
  if (c.gather_copies >= 0) s.gather_copies = c.gather_copies == 1;
  return s;
}

KernelWork gather_copy_work(double elements, double param_bytes) {
  KernelWork w;
  w.add(KernelClass::copy, 2 * elements * param_bytes, 1);
  return w;
}

KernelWork reduce_copy_work(double elements, double param_bytes, double reduce_bytes) {
  KernelWork w;
  w.add(KernelClass::copy, elements * (param_bytes + reduce_bytes), 1);
  return w;
}

ShardingPlan sharding_plan(const Job& job, const LayerPlan& layer) {
  ShardingPlan plan;
  plan.settings = sharding_settings(job.parallel);
  const double params = layer.params();
  if (layer_unit(plan.settings.flavor)) {
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
