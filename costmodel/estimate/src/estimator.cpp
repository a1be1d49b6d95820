// The analytical estimator (estimator.hpp) as named steps over one job:
//   1. stage slots       each stage's kernels and tensor collectives per micro-batch
//                        (stage_cost.hpp, from the layer plan); the slowest is critical;
//   2. sharded           per-layer gathers and reduce-scatters (sharded data parallelism);
//   3. offload           checkpoint copies to the host and back;
//   4. pipeline          fill/drain bubble and the exposed stage-to-stage transfers;
//   5. data parallel     the gradient all-reduce (or RS + AG, or the replicas' all-reduce);
//   6. optimizer         the update of the local shard;
//   7. memory            the largest stage against HBM (and offload against host memory).
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/expert_grid.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include <fmt/format.h>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/fit_hint.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/schedule.hpp"
#include "partune/costmodel/sharding.hpp"
#include "partune/costmodel/job_costs.hpp"
#include "partune/costmodel/stage_cost.hpp"
#include "partune/costmodel/units.hpp"

namespace partune {

namespace {

// Communication that may run under `compute` seconds of kernels. Only the part that
// runs alongside kernels can hide, and of that only the algorithm's compute_overlap
// fraction: GPU-driven rings hold SMs and HBM bandwidth, slowing the kernels beside
// them; CPU-driven transfers do not. The simulator applies the same rule.
double exposed(double comm, double overlap_fraction, double compute) {
  return exposed_beside(comm, overlap_fraction, compute);
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / units::GiB); }

// What every step reads: the job and its costs (the groups' spans, the per-stage costs,
// one rank's parameters).
struct Context {
  const JobCosts& stages;
  const Job& job;
  const ParallelConfig& pc;
  const InstanceType& inst;
  double oversub, eb, gb;  // bytes of an element: of the training precision, of a gradient
  int pp, tp, sdp, dp;
  const Placement& placement;
  const GroupSpan &dp_span, &sdp_span;
  // Expert parallelism: the expert-data groups (the same expert rank in each expert
  // group), over which the experts' gradients are reduced; none without experts.
  int edp;
  const GroupSpan& edp_span;
  const RankParameters& rank;  // one rank's parameters, from the stages' plans

  explicit Context(const JobCosts& costs)
      : stages(costs),
        job(costs.job()),
        pc(job.parallel),
        inst(job.cluster.instance),
        oversub(job.cluster.oversubscription),
        eb(bytes_per_element(job.training.precision)),
        gb(job.gradient_bytes_per_element()),
        pp(pc.pipeline_parallel_degree),
        tp(pc.tensor_parallel_degree),
        sdp(pc.sharded_data_parallel_degree),
        dp(job.data_context_degree()),  // the gradients' group: data x context ranks
        placement(costs.placement()),
        dp_span(costs.data_span()),
        sdp_span(costs.sharded_span()),
        edp(costs.expert_data_degree()),
        edp_span(costs.expert_data_span()),
        rank(costs.rank()) {}
  double cost(CollectiveKind kind, CollectiveAlgorithm algo, double bytes, const GroupSpan& span) const {
    return collective_cost(kind, algo, bytes, span, inst, oversub).total();
  }
  double overlap(CommGroup group, OpKind kind) const {
    return collective_profile(inst, collective_algorithm(pc, group, kind)).compute_overlap;
  }
};

// 1. The slowest stage paces the pipeline; the sum of every stage's slot sizes the
// bubble. Uniform stages come in three kinds (first, middle, last): one of each is enough.
struct Slots {
  int critical = 0;
  StageCost stage;      // the critical stage's cost
  double slot = -1, slot_sum = 0;
};
Slots stage_slots(const Context& c) {
  Slots out;
  auto visit = [&](int s, double count) {
    const StageCost& cost = c.stages.cost(s);
    out.slot_sum += count * cost.slot();
    if (cost.slot() > out.slot) out.slot = cost.slot(), out.critical = s, out.stage = cost;
  };
  if (c.job.uniform_middle_stages() && c.stages.uniform_tensor_groups()) {
    visit(0, 1);
    if (c.pp > 2) visit(1, c.pp - 2);
    if (c.pp > 1) visit(c.pp - 1, 1);
  } else {
    for (int s = 0; s < c.pp; ++s) visit(s, 1);
  }
  return out;
}

// 2. Sharded data parallelism, per micro-batch (sharding.hpp's plan): per layer the
// gather units of its weights before forward and again before backward and the
// reduce-scatter calls of its gradients after, each call paying its latency, the next
// layer's gather issued ahead so it hides under this layer's compute (in backward only
// when the flavour prefetches before the gradient kernels).
struct PerMicrobatch {
  double total = 0, exposed = 0;
  double drain_waits = 0;  // data_parallel: the pipeline's drain stretched by later stages' buckets
};
PerMicrobatch sharded(const Context& c, const Slots& slots) {
  PerMicrobatch out;
  if (c.sdp <= 1) return out;
  const LayerTime& lt = c.stages.layer_time();
  const ShardingPlan plan = sharding_plan(c.job, c.stages.layer());
  const double layers = c.job.layers_on_stage(slots.critical);
  const double checkpointed = c.job.checkpointed_layers_on_stage(slots.critical);
  const double recompute = lt.recompute(c.pc.activation_checkpointing);
  const CollectiveAlgorithm ag_algo = collective_algorithm(c.pc, CommGroup::sharded, OpKind::all_gather);
  const CollectiveAlgorithm rs_algo = collective_algorithm(c.pc, CommGroup::sharded, OpKind::reduce_scatter);
  const double ag = plan.gather_calls() *
                    c.cost(CollectiveKind::all_gather, ag_algo, plan.gather_elements() * c.eb, c.sdp_span);
  const double rs = plan.reduce_calls *
                    c.cost(CollectiveKind::reduce_scatter, rs_algo, plan.reduce_elements * c.gb, c.sdp_span);
  const double ag_ov = c.overlap(CommGroup::sharded, OpKind::all_gather);
  const double rs_ov = c.overlap(CommGroup::sharded, OpKind::reduce_scatter);
  out.total = layers * (2 * ag + rs);
  // FSDP2's copies run on the compute stream, in the kernels the collectives hide under
  // (the programs add them to the layer's compute instruction): after each gather, and
  // before the reduce-scatter.
  const GpuProfile& gpu = c.inst.gpu;
  const bool copies = plan.settings.gather_copies;
  const double reduced = plan.reduce_calls * plan.reduce_elements;
  const double copy_fwd = copies ? kernel_work_time(gpu, gather_copy_work(plan.gathered, c.eb)) : 0.0;
  const double copy_bwd = copies ? copy_fwd + kernel_work_time(gpu, reduce_copy_work(reduced, c.eb, c.gb)) : 0.0;
  // Backward: the gather hides under the gradient kernels only when it is issued before
  // them; else it waits alone and the reduce-scatter hides by itself.
  auto backward = [&](double kernels) {
    kernels += copy_bwd;
    const double comm = !plan.backward_prefetch_before_compute
                            ? ag + exposed(rs, rs_ov, kernels)
                            : exposed(ag + rs, (ag * ag_ov + rs * rs_ov) / (ag + rs), kernels);
    return comm + copy_bwd;
  };
  // The first layer's gather has nothing to hide under.
  out.exposed = layers * (exposed(ag, ag_ov, lt.forward() + copy_fwd) + copy_fwd) +
                checkpointed * backward(lt.backward() + recompute) + (layers - checkpointed) * backward(lt.backward()) +
                ag;
  // Embedding and head weights are gathered and reduced the same way, one call more with
  // the layer beside them (program_builder.cpp's extra unit): the embedding with the first layer,
  // the head with the last, or both with the first when the head is on stage 0, which
  // also gathers them once more for the head's own forward and backward.
  const bool head_first = c.job.lm_head_on_first_stage();
  const double embedding = c.rank.embedding, head = c.rank.head;  // parameters
  auto unit = [&](double params) {
    return 2 * c.cost(CollectiveKind::all_gather, ag_algo, params * c.eb, c.sdp_span) +
           c.cost(CollectiveKind::reduce_scatter, rs_algo, params * c.gb, c.sdp_span);
  };
  const double head_comm = head_first ? unit(embedding + head) + c.cost(CollectiveKind::all_gather, ag_algo,
                                                                        (embedding + head) * c.eb, c.sdp_span)
                                      : unit(embedding) + unit(head);
  const HeadTime& ht = c.stages.head_time();
  out.total += head_comm;
  out.exposed += exposed(head_comm, ag_ov, ht.logits_fwd + ht.logits_bwd);
  if (copies) {  // the embedding and head units' copies, with the layers beside them: twice gathered, once reduced
    const double extras = embedding + head;
    out.exposed += kernel_work_time(gpu, gather_copy_work(extras, c.eb)) * 2 +
                   kernel_work_time(gpu, reduce_copy_work(extras, c.eb, c.gb));
  }
  return out;
}

// 3. Activation offload: checkpoints go to the host during forward and come back ahead of
// backward, over the PCIe switch that the GPUs of one stage behind it share (those of
// other stages copy at other moments); the copies hide under the pass they run beside.
PerMicrobatch offload(const Context& c, const Slots& slots) {
  PerMicrobatch out;
  if (!c.pc.offload_activations || c.pc.activation_checkpointing == Checkpointing::none) return out;
  const double checkpointed = c.job.checkpointed_layers_on_stage(slots.critical);
  const double bytes = stored_layer_bytes(c.job, c.stages.layer(false), c.stages.layer(true)) * checkpointed;
  const int sharers = same_stage_gpus(c.placement, c.inst.gpus_per_node, std::max(1, c.inst.gpus_per_pcie_switch));
  const double one_way = bytes / (c.inst.pcie_bw / sharers);
  out.total = 2 * one_way;
  out.exposed = std::max(0.0, one_way - slots.stage.forward) +
                std::max(0.0, one_way - slots.stage.backward - slots.stage.recompute);
  return out;
}

// 4. Pipeline, per pass: the slowest stage sets the pace of the m micro-batches; filling
// and draining costs every other stage's slot once (divided by v with virtual stages):
//   pass = m * slot_max + (sum of all stages' slots - slot_max) / v,
// which is (m + (p-1)/v) * slot for uniform stages. GPipe runs in windows of
// active_microbatches, each with its own fill and drain. Each slot waits on a blocking
// activation and gradient transfer; a head on stage 0 adds the hop from the last stage to
// stage 0 and back for every micro-batch.
struct PipelinePass {
  double bubble = 0, p2p = 0;
};
PipelinePass pipeline(const Context& c, const Slots& slots, double exposed_per_microbatch) {
  const double m = c.pc.microbatches, v = c.pc.virtual_stages;
  const int active = active_microbatches(c.job.parallel);
  const double windows =
      c.pc.pipeline == PipelineSchedule::gpipe ? std::ceil(m / std::min<double>(active, m)) : 1.0;
  PipelinePass out;
  // Fill and drain pass through every other stage's slot, stretched as the critical one
  // is by its exposed sharded gathers and offload copies.
  out.bubble = windows * (slots.slot_sum - slots.slot + (c.pp - 1) * exposed_per_microbatch) / v;
  // A split backward (zb-h1): the stages' schedules run together with each stage's
  // forward, B and W (schedule_makespan); what the critical stage does not compute is
  // the bubble: (p - 1)(F + B - W) for uniform stages and m >= p (Qi et al. 2023;
  // 1F1B's is (p - 1)(F + B + W)).
  if (splits_backward(c.pc.pipeline)) {
    std::vector<ChunkTimes> times;
    for (int s = 0; s < c.pp; ++s) {
      const StageCost& cost = c.stages.cost(s);
      times.push_back({cost.forward_slot() / v, (cost.backward_slot() - cost.weight) / v, cost.weight / v});
    }
    out.bubble = std::max(0.0, schedule_makespan(c.pc, times) - m * slots.slot) +
                 (c.pp - 1) * exposed_per_microbatch / v;
  }
  if (c.pp > 1) {
    const double hop = c.stages.pipeline_hop();
    // With overlap_p2p_comm each receive is posted before the compute ahead of it (a
    // chunk's forward at the least), so in the steady state only what of a hop that
    // compute does not cover waits; the fill's hops have nothing ahead of them.
    const double steady = c.pc.overlap_p2p_comm ? std::max(0.0, hop - slots.stage.forward / v) : hop;
    out.p2p = 2.0 * (c.pp - 1) * hop + 2.0 * m * v * steady + (c.job.lm_head_on_first_stage() ? 2.0 * m * steady : 0.0);
  }
  return out;
}

// 5. Data-parallel gradient synchronisation, once per step. Each stage's gradient buckets
// run beside that stage's last backward, and the last backwards form a chain: a stage
// starts its own when the stage after it sends the gradient. A GPU-driven collective
// lets the kernels beside it progress at only its compute_overlap rate (the simulator's
// rule), so every stage's last backward is stretched by its own buckets and the
// stretches add up along the drain (the later stages' stretches are drain time the
// critical first stage waits through: pipeline time, as the simulator's critical
// rank sees them); what is left of the buckets after the first stage's
// backward is exposed at the end. (Only the last micro-batch carries buckets: gradient
// accumulation defers the synchronisation; with gradient sharding every one does.)
// A stage's last backward, B seconds of kernels over L layers, beside C seconds of its
// buckets: one bucket per layer, each issued when its layer's backward ends, so the first
// layer (B / L) runs alone. Beside a collective the kernels lose (1 - overlap) of each
// second, and the time lost runs beside it too: the other B' = B (L - 1) / L seconds end
// after min(B' / overlap, B' + (1 - overlap) C). The buckets end C after they start.
struct BucketStretch {
  double stretch = 0;   // how much longer the stage's last backward runs
  double leftover = 0;  // bucket time still running after it
};
BucketStretch bucket_stretch(double comm, double overlap, double backward, double layers) {
  const double alone = backward / std::max(1.0, layers), beside = backward - alone;
  double kernels_end = beside + (1.0 - overlap) * comm;
  if (overlap > 0) kernels_end = std::min(kernels_end, beside / overlap);
  BucketStretch out;
  out.stretch = kernels_end - beside;
  out.leftover = std::max(0.0, comm - kernels_end);
  return out;
}

// The drain over every stage (1F1B, GPipe, interleaved). The critical rank (the first stage, which finishes last)
// waits on the stretches of the later stages' last backwards: pipeline drain time, not
// its own communication. Its own exposure is its stretch plus the bucket time still
// running once the chain reaches it (which can be a later stage's leftover).
struct Drain {
  double own = 0;           // the first stage's stretch and the leftover at the end
  double waits = 0;         // the later stages' stretches, waited for along the chain
  double largest_comm = 0;  // the longest stage's buckets
};
Drain drain_exposed(const Context& c, double overlap, const std::function<double(int)>& stage_comm) {
  // Uniform stages come in three kinds (first, middle, last): work each out once.
  const bool uniform = c.job.uniform_middle_stages() && c.stages.uniform_tensor_groups();
  struct Kind {
    int stage = -1;
    double backward = 0, comm = 0;
    BucketStretch bucket;
  } kinds[3];
  auto kind_of = [&](int s) -> const Kind& {
    Kind& k = kinds[!uniform ? 1 : s == 0 ? 0 : s == c.pp - 1 ? 2 : 1];
    if (k.stage != s && (k.stage < 0 || !uniform)) {
      const StageCost& cost = c.stages.cost(s);
      k.stage = s;
      k.backward = cost.backward + cost.recompute;
      k.comm = stage_comm(s);
      k.bucket = bucket_stretch(k.comm, overlap, k.backward, c.job.layers_on_stage(s) + 1.0);
    }
    return k;
  };
  Drain out;
  if (splits_backward(c.pc.pipeline)) {
    // A split backward (zb-h1): each stage's buckets run beside its last W's, which no
    // stage waits for (its B already sent the gradient), so nothing propagates along the
    // drain; the stages end together and the slowest's stretch and leftover are exposed.
    for (int s = 0; s < c.pp; ++s) {
      const Kind& k = kind_of(s);
      const double weight = c.stages.cost(s).weight;
      const BucketStretch b = bucket_stretch(k.comm, overlap, weight, c.job.layers_on_stage(s) + 1.0);
      out.own = std::max(out.own, b.stretch + b.leftover);
      out.largest_comm = std::max(out.largest_comm, k.comm);
    }
    return out;
  }
  double after = 0, leftover = 0;  // after: chain time from stage s to the end
  for (int s = 0; s < c.pp; ++s) {
    const Kind& k = kind_of(s);
    (s == 0 ? out.own : out.waits) += k.bucket.stretch;
    out.largest_comm = std::max(out.largest_comm, k.comm);
    leftover = std::max(leftover, k.bucket.leftover - after);
    after += k.backward + k.bucket.stretch;
  }
  out.own += std::max(0.0, leftover);
  return out;
}

PerMicrobatch data_parallel(const Context& c, const Slots& slots, double stage_params) {
  PerMicrobatch out;
  if (c.sdp == 1 && c.dp > 1) {
    const CollectiveAlgorithm algo = collective_algorithm(c.pc, CommGroup::data, OpKind::all_reduce);
    const double overlap = c.overlap(CommGroup::data, OpKind::all_reduce);
    // Gradients are all-reduced in buckets during backward; with the optimizer state
    // sharded they are reduce-scattered instead, and the updated weights all-gathered
    // after the optimizer step, with nothing left to hide under.
    const CollectiveKind kind =
        c.pc.shard_optimizer_state ? CollectiveKind::reduce_scatter : CollectiveKind::all_reduce;
    // The drain runs one stage's buckets after another's: only that stage's GPUs share a NIC.
    GroupSpan drain = c.dp_span;
    drain.nic_sharers = same_stage_gpus(c.placement, c.inst.gpus_per_node, c.inst.gpus_per_nic());
    // With expert parallelism the experts' gradients go over the expert-data group.
    const bool split = c.job.model.is_moe() && c.pc.expert_parallel_degree > 1;
    auto experts = [&](int s) { return split ? stage_expert_parameter_count(c.job, c.rank, s) : 0.0; };
    auto expert_cost = [&](CollectiveKind k, double params, const GroupSpan& span) {
      const double bytes = params * (k == CollectiveKind::all_gather ? c.eb : c.gb);  // weights or gradients
      return params > 0 && c.edp > 1 ? c.cost(k, algo, bytes, span) : 0.0;
    };
    auto comm = [&](int s) {
      const double e = experts(s);
      return c.cost(kind, algo, (stage_parameter_count(c.job, c.rank, s) - e) * c.gb, drain) + expert_cost(kind, e, c.edp_span);
    };
    const int largest = c.stages.largest_stage();
    const double e = experts(largest), shared = stage_params - e;
    const double ag = c.pc.shard_optimizer_state ? c.cost(CollectiveKind::all_gather, algo, shared * c.eb, c.dp_span) +
                                                       expert_cost(CollectiveKind::all_gather, e, c.edp_span)
                                                 : 0.0;
    const Drain d = drain_exposed(c, overlap, comm);
    out.total = std::max(c.cost(kind, algo, shared * c.gb, c.dp_span) + expert_cost(kind, e, c.edp_span),
                         d.largest_comm) +
                ag;
    out.exposed = d.own + ag;
    out.drain_waits = d.waits;
    if (c.pc.shard_gradients) {
      // ZeRO-2: every earlier micro-batch's backward carries the critical stage's buckets
      // too; they stretch it as the last one's do, and what is left runs beside the
      // forward that follows (1F1B's next step) before it is exposed.
      const StageCost& k = slots.stage;
      const double one = comm(slots.critical), microbatches = c.pc.microbatches * c.job.training.gradient_accumulation;
      const BucketStretch b = bucket_stretch(one, overlap, k.backward + k.recompute,
                                             c.job.layers_on_stage(slots.critical) + 1.0);
      out.total += (microbatches - 1) * one;
      out.exposed += (microbatches - 1) * (b.stretch + exposed(b.leftover, overlap, k.forward));
    }
  } else if (c.sdp > 1 && c.dp > c.sdp) {
    // Replicas of each shard (MiCS): all-reduce the shard's gradients across them.
    GroupSpan replicas{c.dp / c.sdp, std::max(1, c.dp_span.nodes / std::max(1, c.sdp_span.nodes)), 1};
    replicas.per_node = std::max(1, replicas.size / replicas.nodes);
    out.total = c.cost(CollectiveKind::all_reduce, collective_algorithm(c.pc, CommGroup::replica, OpKind::all_reduce),
                       stage_params / c.sdp * c.gb, replicas);
    out.exposed = out.total;
  }
  return out;
}

// 5b. The sums at the end of the step, after the buckets and before the optimizer (the
// programs' finish_step): with sequence parallelism the replicated parameters used on
// sequence shards (the plans' shard_gradient_params) over the tensor group; a tied
// embedding's two copies on the pipeline's ends. Each covers what a rank owns of the
// gradient (its shard or optimizer slice).
double step_end_sums(const Context& c, int stage) {
  const double owned = c.sdp > 1 ? 1.0 / c.sdp : c.pc.shard_optimizer_state ? 1.0 / c.dp : 1.0;
  const int layers = c.job.layers_on_stage(stage);
  double sum = 0;
  const double shard = layers * c.stages.layer().shard_gradient_params() +
                       (stage == 0 ? c.stages.embedding().shard_gradient_params() : 0.0) +
                       (stage == c.job.lm_head_stage() ? c.stages.head().shard_gradient_params() : 0.0);
  if (shard > 0)
    sum += c.cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, shard * c.gb * owned,
                  c.stages.tensor_span(stage));
  if (c.job.tied_embedding_copies()) {
    const GroupSpan ends = group_span(c.placement, Axis::pipeline, c.inst.fabric_gpus());
    const GroupSpan pair{2, ends.nodes > 1 ? 2 : 1, ends.nodes > 1 ? 1 : 2};
    const double bytes = c.rank.head_projection * c.gb * owned;  // the token table's gradient shard
    sum += c.cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, bytes, pair);
  }
  return sum;
}

// 6. The optimizer step on the local shard, on the device or (offload_optimizer) on the host.
// The optimizer's share of the stage's parameters (the experts' by their own fraction).
double local_params(const Context& c) {
  return stage_optimizer_parameters(c.job, c.rank, c.stages.largest_stage());
}
double optimizer(const Context& c) {
  const TrainingConfig& t = c.job.training;
  const double params = local_params(c);
  if (c.pc.offload_optimizer) return host_optimizer_time(c.inst, t, params, c.gb);
  return optimizer_time(c.inst.gpu, t, params, stage_parameter_tensors(c.job, c.rank, c.stages.largest_stage()), c.gb);
}

// 6b. State offload's blocking copies over the rank's PCIe share (program_builder.cpp): per step
// the gradient shard down and (unless the parameters live on the host) the updated
// shard up; with offload_parameters, per micro-batch each gather's shard up first (every
// layer twice, the embedding and head with the layers beside them).
double state_copies(const Context& c, const Slots& slots, double stage_params) {
  if (!c.pc.offload_optimizer) return 0.0;
  const int sharers = same_stage_gpus(c.placement, c.inst.gpus_per_node, std::max(1, c.inst.gpus_per_pcie_switch));
  const double rate = c.inst.pcie_bw / sharers;
  const double shard = local_params(c);  // its gradient down, its weights back up
  double bytes = shard * c.gb + (c.pc.offload_parameters ? 0.0 : shard * c.eb);
  if (c.pc.offload_parameters) {
    const ShardingPlan plan = sharding_plan(c.job, c.stages.layer());
    const double extras = stage_params - c.job.layers_on_stage(slots.critical) * c.rank.dense_layer;
    // The head on stage 0 gathers the embedding and head once more for its own passes.
    const double head_first = c.job.lm_head_on_first_stage() && slots.critical == 0 ? extras : 0.0;
    const double gathered = c.job.layers_on_stage(slots.critical) * plan.gathered + extras;
    const double microbatches = c.pc.microbatches * c.job.training.gradient_accumulation;
    bytes += microbatches * (2.0 * gathered + head_first) * c.eb / c.sdp;
  }
  return bytes / rate;
}

// 7. Memory: the largest stage against HBM, offloaded activations against host memory.
// What is offloaded, over the node's host memory (when the instance states it).
bool host_memory_exceeded(const InstanceType& inst, const MemoryBreakdown& m) {
  return m.host_offload * inst.gpus_per_node > inst.host_memory_bytes && inst.host_memory_bytes > 0;
}

// The largest stage's memory (estimate_memory) as the estimate's verdict, with the reason
// when it does not fit.
void memory_verdict(const Context& c, const MemoryFit& fit, StepMetrics& e) {
  const double hbm = c.inst.gpu.hbm_bytes;
  e.memory = fit.memory;
  e.memory_capacity = hbm;
  e.fits = fit.fits;
  const double host = e.memory.host_offload * c.inst.gpus_per_node;
  if (e.memory.total() > hbm) {
    e.not_fit_reason = not_fit_reason(c.job, e.memory, hbm);
  } else if (host_memory_exceeded(c.inst, e.memory)) {
    e.not_fit_reason = fmt::format("what is offloaded needs {} of host memory per node, the node has {}",
                                   gib(host), gib(c.inst.host_memory_bytes));
  }
}

StepMetrics headline_metrics(const Job& job, const StepFlops& flops, double step_time) {
  StepMetrics e;
  const double B = job.training.global_batch, N = job.world_size();
  e.step_time = step_time;
  e.samples_per_s = B / step_time;
  e.tokens_per_s = e.samples_per_s * job.model.seq_len;
  e.model_flops = flops.model;
  e.hardware_flops = flops.hardware;
  e.tflops_per_gpu = e.model_flops / (step_time * N) / units::tera;
  e.hw_tflops_per_gpu = e.hardware_flops / (step_time * N) / units::tera;
  e.mfu = e.model_flops / (step_time * N * job.cluster.instance.gpu.peak_flops(job.training.precision));
  return e;
}

}  // namespace

StepMetrics headline_metrics(const Job& job, double step_time) {
  const StepFlops flops =
      step_flops(job.model, job.training.global_batch, job.parallel.activation_checkpointing, job.checkpointed_fraction());
  return headline_metrics(job, flops, step_time);
}

StepMetrics headline_metrics(const JobCosts& costs, double step_time) {
  return headline_metrics(costs.job(), costs.step_flops(), step_time);
}

MemoryFit estimate_memory(const JobCosts& costs) {
  MemoryFit f;
  f.memory = peak_memory(costs);
  const InstanceType& inst = costs.job().cluster.instance;
  f.fits = f.memory.total() <= inst.gpu.hbm_bytes && !host_memory_exceeded(inst, f.memory);
  return f;
}

MemoryFit estimate_memory(const Job& job) { return estimate_memory(JobCosts(job)); }

Estimate estimate(const Job& job) { return estimate(JobCosts(job)); }

Estimate estimate(const JobCosts& costs) { return estimate(costs, estimate_memory(costs)); }

Estimate estimate(const JobCosts& costs, const MemoryFit& memory) {
  const Context c(costs);
  const Job& job = c.job;
  const Slots slots = stage_slots(c);
  const PerMicrobatch shard = sharded(c, slots), copies = offload(c, slots);
  const PipelinePass pass = pipeline(c, slots, shard.exposed + copies.exposed);
  const double stage_params = costs.largest_stage_parameters();
  const PerMicrobatch grads = data_parallel(c, slots, stage_params);

  StepBreakdown br;
  const double passes = job.training.gradient_accumulation, microbatches = c.pc.microbatches * passes;
  br.compute = microbatches * slots.stage.kernels();
  br.recompute = microbatches * slots.stage.recompute;
  br.context_parallel_comm = microbatches * slots.stage.context;
  br.expert_parallel_comm = microbatches * slots.stage.expert;
  br.tensor_parallel_comm =
      std::max(0.0, microbatches * slots.stage.tensor() - br.context_parallel_comm - br.expert_parallel_comm);
  br.pipeline_bubble = passes * pass.bubble;
  br.pipeline_drain_waits = grads.drain_waits;
  br.pipeline_p2p = passes * pass.p2p;
  br.sharded_comm = microbatches * shard.total;
  br.sharded_exposed = microbatches * shard.exposed;
  br.offload_traffic = microbatches * copies.total;
  br.offload_exposed = microbatches * copies.exposed;
  const double sums = std::max(step_end_sums(c, 0), step_end_sums(c, c.pp - 1));
  br.data_parallel_comm = grads.total + sums;
  br.data_parallel_exposed = grads.exposed + sums;
  br.optimizer = optimizer(c);
  const double copies_of_states = state_copies(c, slots, stage_params);
  br.offload_traffic += copies_of_states;
  br.offload_exposed += copies_of_states;
  const double step = br.compute + br.layer_comm() + br.pipeline_bubble + br.pipeline_drain_waits + br.pipeline_p2p +
                      br.sharded_exposed + br.offload_exposed + br.data_parallel_exposed + br.optimizer;
  Estimate e = headline_metrics(costs, step);
  e.breakdown = br;
  memory_verdict(c, memory, e);
  return e;
}

}  // namespace partune
