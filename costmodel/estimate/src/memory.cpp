#include "partune/costmodel/memory.hpp"

#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/sharding.hpp"
#include "partune/costmodel/schedule.hpp"

#include <algorithm>

namespace partune {

// The activations a stage keeps for backward (on the device and offloaded) and the
// working set of a recompute, into `mb`. A mixture of experts keeps each kind's bytes; the
// mean over the stage's layers of a kind stands for a layer (exact when every layer has
// experts).
namespace {
void stage_activations(const Job& job, int stage, const LayerPlan& plan, const LayerPlan& moe, MemoryBreakdown& mb) {
  const ParallelConfig& pc = job.parallel;
  const double layers = job.layers_on_stage(stage);
  const double checkpointed = job.checkpointed_layers_on_stage(stage);
  const LayerMix L = job.stage_mix(stage), K = job.checkpointed_mix(stage);
  const Checkpointing policy = pc.activation_checkpointing;
  auto mean = [](double a, double wa, double b, double wb) { return wa + wb > 0 ? (a * wa + b * wb) / (wa + wb) : a; };
  const double full_layer = mean(plan.stored_bytes(Checkpointing::none), L.dense - K.dense,
                                 moe.stored_bytes(Checkpointing::none), L.moe - K.moe);
  const double in_flight = in_flight_microbatches(pc, stage);
  const double per_layer_stored = mean(plan.stored_bytes(policy), K.dense, moe.stored_bytes(policy), K.moe);
  // Recomputing a checkpointed layer materialises what it did not keep.
  if (checkpointed > 0)
    mb.activation_working = std::max(K.dense > 0 ? plan.recomputed_bytes(policy) : 0.0,
                                     K.moe > 0 ? moe.recomputed_bytes(policy) : 0.0);
  // Checkpointed layers keep what the policy keeps (and only that is offloaded); the
  // others keep their full activations.
  const double checkpointed_layers = checkpointed * in_flight;
  const double full_layers = (layers - checkpointed) * in_flight;
  if (pc.offload_activations && pc.activation_checkpointing != Checkpointing::none) {
    const double on_device = std::min<double>(checkpointed_layers, pc.activation_loading_horizon + 1);
    mb.activations = on_device * per_layer_stored + full_layers * full_layer;
    mb.host_offload = (checkpointed_layers - on_device) * per_layer_stored;
  } else {
    mb.activations = checkpointed_layers * per_layer_stored + full_layers * full_layer;
  }
  // A split backward (zb-h1): B frees a micro-batch's activations but keeps what its
  // deferred W needs; the schedule's walk gives the stage's peak of the two.
  if (splits_backward(pc.pipeline)) {
    const double element = bytes_per_element(job.training.precision);
    const double stored = checkpointed * per_layer_stored + (layers - checkpointed) * full_layer;
    const double held = L.dense * plan.weight_gradient_bytes(element) + L.moe * moe.weight_gradient_bytes(element);
    const double v = pc.virtual_stages;  // each step is one chunk's (uniform chunks)
    mb.activations = peak_split_backward_bytes(remembered_schedule_steps(pc, stage), stored / v, held / v);
  }
}
}  // namespace

namespace {
// The model states of `stage` into `mb` (parameters, gradients, optimizer states, the
// data-parallel gradient buckets); returns fp32 ZeRO-1's slice copies (device buffers
// that stay when the optimizer state is offloaded).
double model_states(const Job& job, const RankParameters& rank, int stage, MemoryBreakdown& mb) {
  const ParallelConfig& pc = job.parallel;
  const int sdp = pc.sharded_data_parallel_degree, dp = job.data_context_degree();
  const ParameterBytes sb = parameter_bytes(job);
  const double params = stage_parameter_count(job, rank, stage);
  mb.parameters = params * sb.weights / sdp;
  mb.gradients = params * sb.gradients / sdp;
  // The optimizer state of the rank's share (Job::optimizer_shard_fraction). A sharded
  // optimizer (ZeRO-1) updates a slice of its own beside the model's full copy. In mixed
  // precision that slice is the fp32 master weights already counted (ZeRO: 2 + 2 + 12 / dp
  // bytes per parameter). In fp32 the model's weights cannot be the master copy (each rank
  // updates only its slice, and the whole copy is gathered back), so the slice's weights
  // and its reduced gradient are two more fp32 copies of 1/dp, as DeepSpeed's fp32
  // partitions and the backend's ParameterShards keep them (device buffers).
  // A mixture of experts' experts are sliced over the expert-data-parallel group instead.
  const bool zero1 = sdp == 1 && pc.shard_optimizer_state;
  const double experts = stage_expert_parameter_count(job, rank, stage), shared = params - experts;
  // ZeRO-2: only the slice the rank's optimizer updates (the experts' over the expert-data
  // group); the whole gradients exist only in the buckets, layer by layer (below).
  if (zero1 && pc.shard_gradients)
    mb.gradients = (shared / dp + experts / job.expert_data_parallel_degree()) * sb.gradients;
  // (With gradient sharding the reduced slice is the gradients counted above.)
  const double slice_copies = zero1 && !mixed_precision(job.training.precision)
                                  ? (shared / dp + experts / job.expert_data_parallel_degree()) *
                                        (sb.weights + (pc.shard_gradients ? 0.0 : sb.gradients))
                                  : 0.0;
  mb.optimizer_states = (shared * job.optimizer_shard_fraction() + experts * job.expert_optimizer_shard_fraction()) *
                            sb.optimizer +
                        slice_copies;
  const LayerMix mix = job.stage_mix(stage);
  const double layer_params = mix.moe > 0 ? std::max(rank.dense_layer, rank.moe_layer)
                                          : rank.dense_layer;  // the largest bucket
  const double extras = params - mix.dense * rank.dense_layer - mix.moe * rank.moe_layer;
  if (dp > 1 && sdp == 1) {
    // Gradient buckets: each layer's full gradients are flattened into a buffer that
    // lives until its all-reduce (or reduce-scatter) completes, about when the next
    // layer's backward ends, so two are in flight. The embedding and head parameters
    // travel in the buckets of the layers next to them. The simulator tracks each
    // bucket from the program instead (issue to completion).
    mb.communication_buffers = (2.0 * layer_params + extras) * sb.gradients;
  }
  return slice_copies;
}

// Sharded data parallelism's gathered parameters and reduce buckets of `stage` into `mb`.
void sharded_buffers(const Job& job, const RankParameters& rank, int stage, const LayerPlan& plan,
                     MemoryBreakdown& mb) {
  const ParameterBytes sb = parameter_bytes(job);
  // The units in use and those gathered ahead (sharding.hpp), and the parameters below
  // the persistence threshold, whole on every rank.
  const ShardingPlan sharding = sharding_plan(job, plan);
  // The embedding or head (one unit each) is gathered whole while it runs, with the
  // next layer's first unit gathered ahead of it.
  const double largest_extra = largest_extra_unit(job, rank, stage);
  const double in_use = std::max(sharding.live_gathered(),
                                 largest_extra + (sharding.units.empty() ? 0.0 : sharding.units.front()));
  mb.gathered_parameters = (in_use + job.layers_on_stage(stage) * sharding.persistent) * sb.weights;
  // Gradients waiting for their reduce-scatter: two reduce buckets (one filling, one in
  // flight; FSDP's unit is its bucket) while the layers run backward, or the whole
  // gradient of the embedding or head, which one kernel writes at once. The two are
  // never live together (the head's gradient is reduced before the layers' backward).
  mb.communication_buffers = std::max(2.0 * sharding.reduce_elements, largest_extra) * sb.gradients;
}
}  // namespace

MemoryBreakdown stage_memory(const JobCosts& costs, int stage) {
  const Job& job = costs.job();
  const RankParameters& rank = costs.rank();
  const PlanCosts& plans = costs.plans();
  const ParallelConfig& pc = job.parallel;
  MemoryBreakdown mb;
  mb.stage = stage;
  const double slice_copies = model_states(job, rank, stage, mb);
  if (pc.sharded_data_parallel_degree > 1) sharded_buffers(job, rank, stage, plans.dense, mb);
  stage_activations(job, stage, plans.dense, plans.moe, mb);
  const double in_flight = in_flight_microbatches(pc, stage);
  if (stage == job.lm_head_stage()) {
    // fp16 logits plus the fp32 copy the cross-entropy works on, vocabulary split over TP.
    // Kept from each micro-batch's forward (where the loss is computed) to its backward:
    // GPipe holds every in-flight micro-batch's; 1F1B runs the last stage's forward and
    // backward back to back, and interleaving keeps the head on one chunk. A head on the
    // first stage runs its forward and backward back to back under every schedule.
    const bool gpipe = pc.pipeline == PipelineSchedule::gpipe && !job.lm_head_on_first_stage();
    mb.logits_one_microbatch = logits_bytes(plans.head);
    mb.logits = mb.logits_one_microbatch * (gpipe ? in_flight : 1.0);
  }
  // ZeRO-Offload / FSDP CPU offload: the optimizer state (and the parameter shard) live
  // on the host; the gradient shard accumulates on the device until the step.
  if (pc.offload_optimizer) {
    // fp32 ZeRO-1's slice copies stay: the reduce-scatter's output and the all-gather's
    // input are device buffers.
    mb.host_offload += mb.optimizer_states - slice_copies;
    mb.optimizer_states = slice_copies;
  }
  if (pc.offload_parameters) {
    mb.host_offload += mb.parameters;
    mb.parameters = 0;
  }
  mb.reserved = job.cluster.instance.gpu.reserved_bytes;
  return mb;
}

MemoryBreakdown stage_memory(const Job& job, int stage) { return stage_memory(JobCosts(job), stage); }

MemoryBreakdown peak_memory(const Job& job) { return peak_memory(JobCosts(job)); }

MemoryBreakdown peak_memory(const JobCosts& costs) {
  const Job& job = costs.job();
  // Uniform stages: stage 0 holds the most in-flight activations and the embedding, the
  // head's stage the logits; middle stages are never larger than both ends. Uneven
  // stages (or a head on stage 0) can make any stage the largest: look at every one.
  const int pp = job.parallel.pipeline_parallel_degree;
  MemoryBreakdown best = stage_memory(costs, 0);
  if (pp == 1) return best;
  auto look = [&](int s) {
    MemoryBreakdown mb = stage_memory(costs, s);
    if (mb.total() > best.total()) best = mb;
  };
  // Llama 3's stages (ends a layer short): a middle stage holds the most layers, and of the
  // middle ones the first the most micro-batches, but a split backward's schedule walk
  // (zb-h1, the V's) peaks where it does: every stage then.
  const bool listed = !job.parallel.stage_layers.empty();
  if (!job.uniform_middle_stages() || (listed && splits_backward(job.parallel.pipeline))) {
    for (int s = 1; s < pp; ++s) look(s);
  } else {
    if (listed && pp > 2) look(1);
    look(pp - 1);
  }
  return best;
}

}  // namespace partune
