#include "partune/costmodel/estimator.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/flops.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/costmodel/units.hpp"

namespace partune {

namespace {

const CollectiveProfile& profile_of(const InstanceType& inst, CollectiveAlgorithm a) {
  switch (a) {
    case CollectiveAlgorithm::tree: return inst.tree;
    case CollectiveAlgorithm::all_to_all: return inst.all_to_all;
    default: return inst.ring;
  }
}

// Communication that may run under `compute` seconds of kernels. Only the part that
// runs alongside kernels can hide, and of that only the algorithm's compute_overlap
// fraction: GPU-driven rings hold SMs and HBM bandwidth, slowing the kernels beside
// them; CPU-driven transfers do not. The simulator applies the same rule.
double exposed(double comm, double overlap_fraction, double compute) {
  return comm - overlap_fraction * std::min(compute, comm);
}

// One pipeline stage's work for one micro-batch.
struct StageWork {
  double forward = 0, backward = 0, recompute = 0;  // kernels
  double total() const { return forward + backward + recompute; }
};

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / units::GiB); }

std::string not_fit_reason(const MemoryBreakdown& m, double capacity) {
  struct Part { const char* name; double bytes; };
  Part parts[] = {{"activations", m.activations + m.activation_working},
                  {"optimizer states", m.optimizer_states},
                  {"parameters", m.parameters + m.gathered_parameters},
                  {"gradients", m.gradients},
                  {"logits", m.logits}};
  std::sort(std::begin(parts), std::end(parts), [](auto& a, auto& b) { return a.bytes > b.bytes; });
  return fmt::format("stage {} needs {} of {} HBM; largest parts: {} {}, {} {}", m.stage,
                     gib(m.total()), gib(capacity), parts[0].name, gib(parts[0].bytes),
                     parts[1].name, gib(parts[1].bytes));
}

}  // namespace

Estimate headline_metrics(const Job& job, double step_time) {
  const ModelSpec& model = job.model;
  Estimate e;
  const double B = job.training.global_batch, N = job.world_size();
  e.step_time = step_time;
  e.samples_per_s = B / step_time;
  e.tokens_per_s = e.samples_per_s * model.seq_len;
  e.model_flops = model_flops_per_step(model, B);
  e.hardware_flops =
      hardware_flops_per_step(model, B, job.parallel.activation_checkpointing, job.checkpointed_fraction());
  e.tflops_per_gpu = e.model_flops / (step_time * N) / units::tera;
  e.hw_tflops_per_gpu = e.hardware_flops / (step_time * N) / units::tera;
  e.mfu = e.model_flops / (step_time * N * job.cluster.instance.gpu.peak_flops(job.training.precision));
  return e;
}

Estimate estimate(const Job& job) {
  const ModelSpec& model = job.model;
  const ParallelConfig& pc = job.parallel;
  const InstanceType& inst = job.cluster.instance;
  const GpuProfile& gpu = inst.gpu;
  const Precision prec = job.training.precision;
  const double oversub = job.cluster.oversubscription;

  const int pp = pc.pipeline_parallel_degree, tp = pc.tensor_parallel_degree;
  const int sdp = pc.sharded_data_parallel_degree, dp = job.data_parallel_degree();
  const double m = pc.microbatches, v = pc.virtual_stages;
  const double ga = job.training.gradient_accumulation;
  const double b = job.microbatch_size();
  const double eb = bytes_per_element(prec);

  const Placement placement(pc.placement_strategy, dp, pp, tp);
  const int G = inst.gpus_per_node;
  const GroupSpan tp_span = group_span(placement, Axis::tensor, G);
  const GroupSpan pp_span = group_span(placement, Axis::pipeline, G);
  const GroupSpan dp_span = group_span(placement, Axis::data, G);
  const GroupSpan sdp_span = subgroup_span(placement, Axis::data, sdp, G);

  // --- tensor parallel: two all-reduces of the layer's activations forward, two
  // backward, two more when full checkpointing recomputes the layer; plus the
  // vocab-parallel embedding's all-reduce. On the critical path (they sit between
  // dependent GEMMs).
  double ar = 0;
  if (tp > 1) {
    const double act = b * model.seq_len * model.hidden * eb;
    ar = collective_cost(CollectiveKind::all_reduce, CollectiveAlgorithm::ring, act, tp_span, inst, oversub).total();
  }
  const double recompute_ar = pc.activation_checkpointing == Checkpointing::full ? 2 : 0;

  // --- each stage's work for one micro-batch (its layers, the embedding on stage 0, the
  // LM head on the head's stage, recompute of its checkpointed layers) and its slot
  // (work + tensor-parallel all-reduces). The slowest slot paces the pipeline.
  const LayerTime lt = layer_time(gpu, model, prec, b, tp, pc.flash_attention);
  const HeadTime ht = head_time(gpu, model, prec, b, tp);
  const double layer_recompute = lt.recompute(pc.activation_checkpointing);
  const bool head_first = job.lm_head_on_first_stage();
  const int head_stage = job.lm_head_stage();
  auto stage_work = [&](int s) {
    StageWork w;
    const double L = job.layers_on_stage(s), K = job.checkpointed_layers_on_stage(s);
    w.forward = L * lt.forward();
    w.backward = L * lt.backward();
    w.recompute = K * layer_recompute;
    if (s == 0) {
      w.forward += ht.embedding_fwd;
      w.backward += ht.embedding_bwd;
    }
    if (s == head_stage) {
      w.forward += ht.logits_fwd;
      w.backward += ht.logits_bwd;
    }
    return w;
  };
  auto stage_tp = [&](int s) {
    return (job.layers_on_stage(s) * 4.0 + job.checkpointed_layers_on_stage(s) * recompute_ar + 2.0) * ar;
  };
  // slot_s = work + tensor all-reduces.
  // Uniform stages come in three kinds (first, middle, last): one of each is enough.
  const bool uniform = pc.stage_layers.empty();
  int critical = 0;
  double slot = -1, slot_sum = 0;
  auto visit = [&](int s, double count) {
    const double slot_s = stage_work(s).total() + stage_tp(s);
    slot_sum += count * slot_s;
    if (slot_s > slot) slot = slot_s, critical = s;
  };
  if (uniform) {
    visit(0, 1);
    if (pp > 2) visit(1, pp - 2);
    if (pp > 1) visit(pp - 1, 1);
  } else {
    for (int s = 0; s < pp; ++s) visit(s, 1);
  }
  const StageWork stage = stage_work(critical);
  const double tp_per_microbatch = stage_tp(critical);
  const double layers = job.layers_on_stage(critical);
  const double checkpointed = job.checkpointed_layers_on_stage(critical);

  // --- sharded data parallel: per layer, an all-gather of its weights before forward
  // and again before backward, a reduce-scatter of its gradients after; prefetched one
  // layer ahead so each hides under the neighbouring layer's compute.
  double sharded_per_microbatch = 0, sharded_exposed_per_microbatch = 0;
  if (sdp > 1) {
    const double layer_bytes = model.layer_params() / tp * eb;
    const CollectiveAlgorithm rs_algo = pc.sharded_collective == CollectiveAlgorithm::all_to_all
                                            ? CollectiveAlgorithm::ring  // SMDDP has AllGather only
                                            : pc.sharded_collective;
    const double ag = collective_cost(CollectiveKind::all_gather, pc.sharded_collective, layer_bytes,
                                      sdp_span, inst, oversub).total();
    const double rs = collective_cost(CollectiveKind::reduce_scatter, rs_algo, layer_bytes,
                                      sdp_span, inst, oversub).total();
    const double ag_ov = profile_of(inst, pc.sharded_collective).compute_overlap;
    const double rs_ov = profile_of(inst, rs_algo).compute_overlap;
    sharded_per_microbatch = layers * (2 * ag + rs);
    const double fwd_exposed = exposed(ag, ag_ov, lt.forward());
    const double bwd_overlap = (ag * ag_ov + rs * rs_ov) / (ag + rs);
    const double bwd_exposed = exposed(ag + rs, bwd_overlap, lt.backward() + layer_recompute);
    const double bwd_exposed_plain = exposed(ag + rs, bwd_overlap, lt.backward());  // not checkpointed
    // The first layer's gather has nothing to hide under.
    sharded_exposed_per_microbatch =
        layers * fwd_exposed + checkpointed * bwd_exposed + (layers - checkpointed) * bwd_exposed_plain + ag;
    // Embedding and head weights are gathered and reduced the same way.
    const double head_bytes = (model.embedding_params() + model.head_params()) / tp * eb;
    // A head on stage 0 gathers the tied weight once more for its own forward and
    // backward (its gradient joins the embedding's reduce-scatter).
    const double head_ag = collective_cost(CollectiveKind::all_gather, pc.sharded_collective, head_bytes,
                                           sdp_span, inst, oversub).total();
    const double head_comm = (head_first ? 3 : 2) * head_ag +
                             collective_cost(CollectiveKind::reduce_scatter, rs_algo, head_bytes,
                                             sdp_span, inst, oversub).total();
    sharded_per_microbatch += head_comm;
    sharded_exposed_per_microbatch += exposed(head_comm, ag_ov, ht.logits_fwd + ht.logits_bwd);
  }

  // --- activation offload: checkpoints go to host during forward and come back ahead of
  // backward, over the PCIe switch the GPU shares with its neighbours.
  double offload_per_microbatch = 0, offload_exposed_per_microbatch = 0;
  if (pc.offload_activations && pc.activation_checkpointing != Checkpointing::none) {
    const double ckpt = stored_layer_bytes(job, b) * checkpointed;  // only checkpointed layers move
    const double pcie = inst.pcie_bw / std::max(1, inst.gpus_per_pcie_switch);
    const double one_way = ckpt / pcie;
    offload_per_microbatch = 2 * one_way;
    offload_exposed_per_microbatch = std::max(0.0, one_way - stage.forward) +
                                     std::max(0.0, one_way - stage.backward - stage.recompute);
  }

  // --- pipeline: the slowest stage sets the pace of the m micro-batches; filling and
  // draining costs every other stage's slot once (divided by v with virtual stages):
  //   pass = m * slot_max + (sum of all stages' slots - slot_max) / v,
  // which is (m + (p-1)/v) * slot for uniform stages. GPipe runs in windows of
  // active_microbatches, each with its own fill and drain. Each slot waits on a blocking
  // activation (forward) and gradient (backward) transfer; a head on stage 0 adds the
  // hop from the last stage to stage 0 and back for every micro-batch.
  const int active = job.effective_active_microbatches();
  const double windows = pc.pipeline == PipelineSchedule::simple ? std::ceil(m / std::min<double>(active, m)) : 1.0;
  double p2p_per_pass = 0;
  if (pp > 1) {
    const double act = b * model.seq_len * model.hidden * eb / tp;  // scatter-gather over TP
    GroupSpan pair{2, pp_span.nodes > 1 ? 2 : 1, pp_span.nodes > 1 ? 1 : 2};
    const double hop = collective_cost(CollectiveKind::send_recv, CollectiveAlgorithm::ring, act,
                                       pair, inst, oversub).total();
    p2p_per_pass = 2.0 * (m * v + pp - 1) * hop + (head_first ? 2.0 * m * hop : 0.0);
  }
  const double bubble_per_pass = windows * (slot_sum - slot) / v;

  // --- data parallel gradient synchronisation (once per step), overlapped with the
  // backward of the last micro-batch.
  double dp_comm = 0, dp_exposed = 0;
  // The stage with the most parameters synchronises (and updates) the most.
  // (With uniform stages a middle stage holds only layers: the ends hold the most.)
  double stage_params = stage_parameter_count(job, 0);
  for (int s = uniform ? pp - 1 : 1; s < pp; ++s) stage_params = std::max(stage_params, stage_parameter_count(job, s));
  if (sdp == 1 && dp > 1) {
    const double grads = stage_params * eb;
    const CollectiveAlgorithm algo = pc.data_parallel_collective;
    const double overlap = profile_of(inst, algo).compute_overlap;
    if (pc.shard_optimizer_state) {
      // Gradients are reduce-scattered in buckets during backward; the updated weights
      // are all-gathered after the optimizer step, with nothing left to hide under.
      const double rs = collective_cost(CollectiveKind::reduce_scatter, algo, grads, dp_span, inst, oversub).total();
      const double ag = collective_cost(CollectiveKind::all_gather, algo, grads, dp_span, inst, oversub).total();
      dp_comm = rs + ag;
      dp_exposed = exposed(rs, overlap, stage.backward) + ag;
    } else {
      dp_comm = collective_cost(CollectiveKind::all_reduce, algo, grads, dp_span, inst, oversub).total();
      dp_exposed = exposed(dp_comm, overlap, stage.backward);
    }
  } else if (sdp > 1 && dp > sdp) {
    // Replicas of each shard (MiCS): all-reduce the shard's gradients across them.
    const double grads = stage_params / sdp * eb;
    GroupSpan replicas{dp / sdp, std::max(1, dp_span.nodes / std::max(1, sdp_span.nodes)), 1};
    replicas.per_node = std::max(1, replicas.size / replicas.nodes);
    dp_comm = collective_cost(CollectiveKind::all_reduce, pc.data_parallel_collective, grads,
                              replicas, inst, oversub).total();
    dp_exposed = dp_comm;
  }

  // --- optimizer step on the local shard.
  double opt_params = stage_params;
  if (sdp > 1) opt_params /= sdp;
  else if (pc.shard_optimizer_state) opt_params /= dp;
  const double opt = optimizer_time(gpu, job.training.optimizer, prec, opt_params);

  Estimate e;
  StepBreakdown& br = e.breakdown;
  const double passes = ga, microbatches = m * ga;
  br.compute = microbatches * stage.total();
  br.recompute = microbatches * stage.recompute;
  br.tensor_parallel_comm = microbatches * tp_per_microbatch;
  br.pipeline_bubble = passes * bubble_per_pass;
  br.pipeline_p2p = passes * p2p_per_pass;
  br.sharded_comm = microbatches * sharded_per_microbatch;
  br.sharded_exposed = microbatches * sharded_exposed_per_microbatch;
  br.offload_traffic = microbatches * offload_per_microbatch;
  br.offload_exposed = microbatches * offload_exposed_per_microbatch;
  br.data_parallel_comm = dp_comm;
  br.data_parallel_exposed = dp_exposed;
  br.optimizer = opt;
  e.step_time = br.compute + br.tensor_parallel_comm + br.pipeline_bubble + br.pipeline_p2p +
                br.sharded_exposed + br.offload_exposed + br.data_parallel_exposed + br.optimizer;

  {
    const StepBreakdown kept = e.breakdown;
    e = headline_metrics(job, e.step_time);
    e.breakdown = kept;
  }

  e.memory = peak_memory(job);
  e.memory_capacity = gpu.hbm_bytes;
  if (e.memory.total() > gpu.hbm_bytes) {
    e.fits = false;
    e.not_fit_reason = not_fit_reason(e.memory, gpu.hbm_bytes);
  } else if (e.memory.host_offload * G > inst.host_memory_bytes && inst.host_memory_bytes > 0) {
    e.fits = false;
    e.not_fit_reason = fmt::format("offloaded activations need {} of host memory per node, the node has {}",
                                   gib(e.memory.host_offload * G), gib(inst.host_memory_bytes));
  }
  return e;
}

}  // namespace partune
