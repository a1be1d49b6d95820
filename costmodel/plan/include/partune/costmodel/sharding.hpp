#pragma once
// Sharded data parallelism as each system runs it, from the layer plan: which parameters
// are gathered together (one all-gather call each), which stay whole on every rank, how
// far ahead the next gather is issued, and how gradients are cut into reduce-scatter
// calls. The estimator (its sharded step) and the per-rank programs (program_builder.cpp) read
// the same plan, so both pay the same calls.
//
// Flavours and their public defaults (parallel.sharding_flavor, parallel.sharding):
//   smp    SageMaker model parallel v1.11+ sharded data parallelism (MiCS). Its ZeRO
//          configuration is DeepSpeed's with the sdp_ keys applied (smdistributed's
//          zero2d config): sdp_reduce_bucket_size 5e8, sdp_param_persistence_threshold
//          1e6, sdp_hierarchical_allgather true (AWS SageMaker developer guide, "Sharded
//          Data Parallelism"); stage3_prefetch_bucket_size DeepSpeed's 5e7.
//   zero3  DeepSpeed ZeRO-3 (DeepSpeed configuration JSON docs): reduce_bucket_size 5e8,
//          stage3_prefetch_bucket_size 5e7, stage3_param_persistence_threshold 1e5; flat
//          collectives over the whole group.
//   fsdp   PyTorch FSDP with the transformer layer as the wrapping unit
//          (transformer_auto_wrap_policy): each layer's parameters are one flat
//          parameter, gathered in one call and reduce-scattered in one call;
//          backward_prefetch BACKWARD_PRE (its default).
//   fsdp2  PyTorch's fully_shard (FSDP2, torchtitan), the same units and calls, and its
//          copies on the compute stream (gather_copies; torch/distributed/fsdp/_fully_shard/
//          _fsdp_collectives.py): after each all-gather, foreach_all_gather_copy_out's
//          split_with_sizes_copy moves the unit out of the all-gather buffer into its
//          parameters (the unit's elements read and written in the parameters' format);
//          before each reduce-scatter, foreach_reduce's chunk_cat copies the gradients into
//          the reduce-scatter's input (read in the parameters' format, written in the
//          reduce format: fp32 with grad_reduce_in_fp32). Its copy-in before the all-gather
//          (a rank's shard, 1/n of the unit) runs on its own stream and is not priced. The
//          LibTorch backend copies the same way for every flavour (parameter_shards.cpp's
//          unpack_parameters, pack_gradients).
// The DeepSpeed family gathers per module: each op of the layer plan that holds at least
// param_persistence_threshold parameters is a unit; smaller ones (norms, biases) stay
// whole on every rank and their gradients travel in the reduce-scatter buckets.
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/layer_plan.hpp"

namespace partune {

// The flavour's knobs with every default applied.
struct ShardingSettings {
  ShardingFlavor flavor = ShardingFlavor::smp;
  double prefetch_bucket_size = 0;         // elements (smp, zero3)
  double reduce_bucket_size = 0;           // elements (smp, zero3); 0: one call per unit (fsdp)
  double param_persistence_threshold = 0;  // elements (smp, zero3)
  bool hierarchical_allgather = false;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::pre;
  bool gather_copies = false;  // fsdp2's copies on the compute stream
};
ShardingSettings sharding_settings(const ParallelConfig& pc);

// The copies gather_copies adds on the compute stream, one kernel each: after a gather of
// `elements` parameters, their copy out of the buffer (read and write at `param_bytes`);
// before a reduce-scatter of `elements` gradients, their copy into its input (read at
// `param_bytes`, written at `reduce_bytes`). Class KernelClass::copy.
KernelWork gather_copy_work(double elements, double param_bytes);
KernelWork reduce_copy_work(double elements, double param_bytes, double reduce_bytes);

// One transformer layer's sharded collectives on one rank, per pass.
struct ShardingPlan {
  ShardingSettings settings;
  std::vector<double> units;  // parameter elements of each gather unit, forward order
  double gathered = 0;        // their sum: what one all-gather pass over the layer brings
  double persistent = 0;      // parameters left whole on every rank (below the threshold)
  // Reduce-scatter calls of one layer's gradients (all its parameters) and elements in each:
  // FSDP one per unit; the DeepSpeed family ceil(params / reduce_bucket_size), at least one.
  int reduce_calls = 1;
  double reduce_elements = 0;
  // Whether the next layer's gather is issued before the current layer's backward
  // kernels (prefetch), or only once they are done (fsdp backward_prefetch post) or the
  // layer is reached (none). Forward always gathers one layer ahead: DeepSpeed prefetches
  // at least one module, and FSDP's CPU issues the next unit's all-gather on its own
  // stream while the current unit's kernels run.
  bool backward_prefetch_before_compute = true;
  bool backward_prefetch = true;

  int gather_calls() const { return static_cast<int>(units.size()); }
  // Elements in each of the layer's gather calls (their mean: a call's cost is affine in
  // its bytes, so `calls` calls of the mean cost what the units cost).
  double gather_elements() const { return units.empty() ? 0.0 : gathered / units.size(); }
  // Parameters materialised at once at the peak: the largest unit in use plus what is
  // gathered ahead of it (at least the next unit; up to prefetch_bucket_size more).
  double live_gathered() const;
};

// The plan of `job`'s transformer layer (sharded_data_parallel_degree > 1), from its
// layer plan (transformer_layer_plan at plan_config(job); the micro-batch size does not
// matter, only the ops' parameters).
ShardingPlan sharding_plan(const Job& job, const LayerPlan& layer);

}  // namespace partune
