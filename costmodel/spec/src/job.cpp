#include "partune/costmodel/job.hpp"


#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/job_rules.hpp"
#include "partune/costmodel/pipeline_layout.hpp"

namespace partune {

// The names live in one table per enum (enum_names.cpp), shared with the scenario loader
// and writer.
const char* to_string(Optimizer o) { return enum_name(o); }
const char* to_string(PipelineSchedule s) { return enum_name(s); }
const char* to_string(Checkpointing c) { return enum_name(c); }
const char* to_string(CollectiveAlgorithm a) { return enum_name(a); }
const char* to_string(LmHeadStage h) { return enum_name(h); }
const char* to_string(ShardingFlavor f) { return enum_name(f); }
const char* to_string(BackwardPrefetch b) { return enum_name(b); }
const char* to_string(LossPrecision p) { return enum_name(p); }
const char* to_string(ContextComm c) { return enum_name(c); }

int model_chunk(const ParallelConfig& pc, int stage, int chunk) {
  const int p = pc.pipeline_parallel_degree;
  if (v_shaped(pc.pipeline)) return chunk == 0 ? stage : 2 * p - 1 - stage;
  return chunk * p + stage;
}

ChunkPosition chunk_position(const ParallelConfig& pc, int k) {
  const int p = pc.pipeline_parallel_degree;
  if (v_shaped(pc.pipeline)) return k < p ? ChunkPosition{k, 0} : ChunkPosition{2 * p - 1 - k, 1};
  return {k % p, k / p};
}

bool Job::chunk_layers_listed() const {
  return parallel.virtual_stages > 1 &&
         static_cast<int>(parallel.stage_layers.size()) ==
             parallel.pipeline_parallel_degree * parallel.virtual_stages;
}

int Job::layers_in_chunk(int stage, int chunk) const {
  const auto& sl = parallel.stage_layers;
  const int pp = parallel.pipeline_parallel_degree;
  if (chunk_layers_listed()) return sl[static_cast<std::size_t>(model_chunk(parallel, stage, chunk))];
  if (!sl.empty()) return sl[static_cast<std::size_t>(stage)];  // one chunk a stage
  return model.layers / (pp * parallel.virtual_stages);
}

int Job::layers_on_stage(int stage) const {
  int layers = 0;
  for (int c = 0; c < parallel.virtual_stages; ++c) layers += layers_in_chunk(stage, c);
  return layers;
}

int Job::global_layer(int stage, int chunk, int layer) const {
  const int pp = parallel.pipeline_parallel_degree, k = model_chunk(parallel, stage, chunk);
  if (parallel.stage_layers.empty()) return k * layers_in_chunk(stage, chunk) + layer;
  int first = 0;  // the layers of the model chunks before this one
  for (int s = 0; s < pp; ++s)
    for (int c = 0; c < parallel.virtual_stages; ++c)
      if (model_chunk(parallel, s, c) < k) first += layers_in_chunk(s, c);
  return first + layer;
}

int Job::checkpointed_layers_on_stage(int stage) const {
  if (parallel.activation_checkpointing == Checkpointing::none) return 0;
  const int layers = layers_on_stage(stage);
  return parallel.checkpointed_layers < 0 ? layers : std::min(parallel.checkpointed_layers, layers);
}

int Job::checkpointed_layers_in_chunk(int stage, int chunk) const {
  int before = 0;  // the stage's layers in its earlier chunks
  for (int c = 0; c < chunk; ++c) before += layers_in_chunk(stage, c);
  return std::clamp(checkpointed_layers_on_stage(stage) - before, 0, layers_in_chunk(stage, chunk));
}

double Job::checkpointed_fraction() const {
  if (parallel.activation_checkpointing == Checkpointing::none || model.layers <= 0) return 0.0;
  if (parallel.checkpointed_layers < 0) return 1.0;
  int checkpointed = 0;
  for (int s = 0; s < parallel.pipeline_parallel_degree; ++s) checkpointed += checkpointed_layers_on_stage(s);
  return static_cast<double>(checkpointed) / model.layers;
}

LayerMix layer_mix(const ModelSpec& m, int first, int count) {
  LayerMix mix;
  mix.moe = m.moe_layers_in(first, count);
  mix.dense = std::max(0, count) - mix.moe;
  return mix;
}

LayerMix Job::chunk_mix(int stage, int chunk, int first, int count) const {
  return layer_mix(model, global_layer(stage, chunk, first), count);
}

LayerMix Job::stage_mix(int stage) const {
  LayerMix out;
  for (int c = 0; c < parallel.virtual_stages; ++c) {
    const LayerMix m = chunk_mix(stage, c, 0, layers_in_chunk(stage, c));
    out.dense += m.dense;
    out.moe += m.moe;
  }
  return out;
}

LayerMix Job::checkpointed_mix(int stage) const {
  LayerMix out;
  for (int c = 0; c < parallel.virtual_stages; ++c) {
    const LayerMix m = chunk_mix(stage, c, 0, checkpointed_layers_in_chunk(stage, c));
    out.dense += m.dense;
    out.moe += m.moe;
  }
  return out;
}

bool Job::uniform_middle_stages() const {
  const std::vector<int>& sl = parallel.stage_layers;
  if (sl.empty()) return true;
  if (model.is_moe()) return false;  // which layers carry experts differs by position
  for (std::size_t i = 2; i + 1 < sl.size(); ++i)
    if (sl[i] != sl[1]) return false;
  return true;
}

int Job::expert_tensor_degree() const {
  return parallel.expert_tensor_parallel_degree > 0 ? parallel.expert_tensor_parallel_degree
                                                    : std::max(1, parallel.tensor_parallel_degree);
}

int Job::expert_data_parallel_degree() const {
  const int grid = std::max(1, parallel.tensor_parallel_degree) * data_context_degree();
  return std::max(1, grid / (expert_tensor_degree() * std::max(1, parallel.expert_parallel_degree)));
}

double Job::expert_optimizer_shard_fraction() const {
  if (parallel.shard_optimizer_state) return 1.0 / expert_data_parallel_degree();
  return optimizer_shard_fraction();
}

double Job::gradient_bytes_per_element() const {
  return parallel.grad_reduce_in_fp32 ? 4.0 : bytes_per_element(training.precision);
}

int Job::data_parallel_degree() const {
  const int cp = std::max(1, parallel.context_parallel_degree);
  return data_context_degree() / cp;
}

int Job::data_context_degree() const {
  const int mp = parallel.pipeline_parallel_degree * parallel.tensor_parallel_degree;
  return mp > 0 ? world_size() / mp : 0;
}

double Job::optimizer_shard_fraction() const {
  if (parallel.sharded_data_parallel_degree > 1) return 1.0 / parallel.sharded_data_parallel_degree;
  if (parallel.shard_optimizer_state && data_context_degree() > 0) return 1.0 / data_context_degree();
  return 1.0;
}

int Job::microbatch_size() const {
  const int per_step = data_parallel_degree() * parallel.microbatches *
                       training.gradient_accumulation;
  return per_step > 0 ? training.global_batch / per_step : 0;
}


namespace {

JobViolation bad(const char* key, std::string reason) { return JobViolation{key, std::move(reason)}; }

// Expert parallelism (Megatron-core's rules): the expert grid (expert-tensor x expert x
// expert-data ranks) covers a stage's tensor x data ranks, the expert degree divides the
// experts and the expert-tensor degree their widths; sharded data parallelism (one shard
// group per data-parallel group) is not combined with it.
JobViolation check_experts(const Job& job) {
  const auto& m = job.model;
  const ParallelConfig& pc = job.parallel;
  const int ep = pc.expert_parallel_degree, dp = job.data_context_degree(), tp = pc.tensor_parallel_degree;
  if (ep < 1) return bad("parallel.expert_parallel_degree", "must be >= 1");
  if (pc.expert_tensor_parallel_degree < 0) return bad("parallel.expert_tensor_parallel_degree", "must be >= 0");
  if (!m.is_moe()) {
    if (ep > 1) return bad("parallel.expert_parallel_degree", "the model has no experts (model.experts is 0)");
    if (pc.expert_tensor_parallel_degree > 0)
      return bad("parallel.expert_tensor_parallel_degree", "the model has no experts (model.experts is 0)");
    if (pc.moe_a2a_overlap) return bad("parallel.moe_a2a_overlap", "the model has no experts (model.experts is 0)");
    return {};
  }
  const int etp = job.expert_tensor_degree();
  const bool folded = etp != tp;
  if (pc.moe_a2a_overlap && ep <= 1)
    return bad("parallel.moe_a2a_overlap", "overlaps the expert group's exchanges: set expert_parallel_degree > 1");
  if (pc.moe_token_dispatcher == MoeDispatcher::allgather && tp > 1 && !pc.sequence_parallel)
    return bad("parallel.moe_token_dispatcher",
               "allgather is Megatron-Core's dispatcher: it needs sequence_parallel: true with tensor parallelism");
  if (pc.moe_token_dispatcher == MoeDispatcher::deepep && etp > 1)
    return bad("parallel.moe_token_dispatcher", "deepep is modelled with expert tensor degree 1, as the recipes run it");
  if (folded && ep <= 1)
    return bad("parallel.expert_tensor_parallel_degree",
               fmt::format("{} differs from the tensor degree {} without expert parallelism: set "
                           "expert_parallel_degree", etp, tp));
  if (folded && tp > 1 && !pc.sequence_parallel)
    return bad("parallel.expert_tensor_parallel_degree",
               fmt::format("{} differs from the tensor degree {}: Megatron-Core's MoE layout needs "
                           "sequence_parallel: true with tensor parallelism", etp, tp));
  if ((tp * dp) % (etp * ep) != 0)
    return bad(folded ? "parallel.expert_tensor_parallel_degree" : "parallel.expert_parallel_degree",
               folded ? fmt::format("expert tensor {} x expert {} does not divide a stage's {} tensor x data ranks "
                                    "(the expert grid is drawn from them)", etp, ep, tp * dp)
                      : fmt::format("{} does not divide the data-parallel degree {} (expert groups are made of "
                                    "data-parallel ranks{})", ep, dp,
                                    pc.context_parallel_degree > 1 ? ", context ranks included" : ""));
  if (m.experts % ep != 0)
    return bad("parallel.expert_parallel_degree", fmt::format("{} does not divide the model's {} experts", ep, m.experts));
  if (m.expert_ffn_hidden % etp != 0)
    return bad(folded ? "parallel.expert_tensor_parallel_degree" : "parallel.tensor_parallel_degree",
               fmt::format("{} does not divide expert_ffn_hidden {}", etp, m.expert_ffn_hidden));
  if (m.shared_expert_ffn_hidden % tp != 0)
    return bad("parallel.tensor_parallel_degree",
               fmt::format("{} does not divide shared_expert_ffn_hidden {}", tp, m.shared_expert_ffn_hidden));
  if (pc.sharded_data_parallel_degree > 1)
    return bad("parallel.sharded_data_parallel_degree",
               "sharded data parallelism is not combined with a mixture-of-experts model here: use "
               "expert_parallel_degree with shard_optimizer_state");
  return {};
}

// Megatron's recompute modules name parts the model has.
JobViolation check_recompute_modules(const Job& job) {
  const RecomputeModules set = job.parallel.recompute_modules;
  const ModelSpec& m = job.model;
  const char* key = "parallel.recompute_modules";
  if (has_module(set, RecomputeModule::mla_up_proj) && !m.is_mla())
    return bad(key, "mla_up_proj applies to multi-head latent attention (model.attention: mla)");
  for (RecomputeModule e : {RecomputeModule::moe, RecomputeModule::moe_act, RecomputeModule::shared_experts})
    if (has_module(set, e) && !m.is_moe())
      return bad(key, fmt::format("{} applies to a mixture of experts (model.experts)", enum_name(e)));
  if (has_module(set, RecomputeModule::shared_experts) && m.shared_expert_ffn_hidden <= 0)
    return bad(key, "shared_experts: the model has no shared experts (model.shared_expert_ffn_hidden)");
  return {};
}

// Context parallelism (Megatron-core's rules): the degree divides the data axis; the
// sequence splits into 2 cp chunks (causal load balancing) and, with sequence
// parallelism, each rank's s / cp tokens over the tensor group; a2a splits each tensor
// rank's query and key/value heads over the context group (a2a+p2p: over its a2a
// sub-group, whose size divides cp and leaves a ring of at least 2).
JobViolation check_context(const Job& job) {
  const auto& m = job.model;
  const auto& pc = job.parallel;
  const int cp = pc.context_parallel_degree, tp = pc.tensor_parallel_degree;
  const char* key = "parallel.context_parallel_degree";
  if (cp < 1) return bad(key, "must be >= 1");
  if (cp == 1) return {};
  const int axis = job.data_context_degree();
  if (axis % cp != 0)
    return bad(key, fmt::format("{} does not divide the {} GPUs / (pp {} x tp {}) = {}", cp, job.world_size(),
                                pc.pipeline_parallel_degree, tp, axis));
  if (m.seq_len % (2 * cp) != 0)
    return bad(key, fmt::format("the sequence length {} does not split into 2 x {} chunks (causal load balancing)",
                                m.seq_len, cp));
  if (pc.sequence_parallel && (m.seq_len / cp) % tp != 0)
    return bad("parallel.sequence_parallel",
               fmt::format("a context rank's {} tokens do not split over tensor degree {}", m.seq_len / cp, tp));
  const bool hierarchical = pc.cp_comm_type == ContextComm::a2a_p2p;
  const int a2a = hierarchical ? pc.context_a2a_degree : cp;  // ranks the heads split over
  if (hierarchical && (a2a < 2 || cp % a2a != 0 || cp / a2a < 2))
    return bad("parallel.context_a2a_degree",
               fmt::format("a2a+p2p needs an a2a sub-group of 2 or more ranks dividing the context degree {} into "
                           "rings of 2 or more (got {})", cp, a2a));
  if (!hierarchical && pc.context_a2a_degree != 0)
    return bad("parallel.context_a2a_degree", "applies to cp_comm_type a2a+p2p");
  if (pc.cp_comm_type == ContextComm::a2a || hierarchical) {
    const int heads = m.heads / tp, kv = std::max(1, m.is_mla() ? m.heads / tp : m.kv_heads / tp);
    if (heads % a2a != 0 || kv % a2a != 0)
      return bad("parallel.cp_comm_type",
                 fmt::format("{} splits each tensor rank's {} query and {} key/value heads over {} context ranks: "
                             "they do not divide (use p2p)", to_string(pc.cp_comm_type), heads, kv, a2a));
  }
  return {};
}

// The degrees: each >= 1, tensor within a node, and dividing the cluster, the data-parallel
// degree and the model's heads and feed-forward width.
JobViolation check_degrees(const Job& job) {
  const auto& m = job.model;
  const auto& pc = job.parallel;
  const int world = job.world_size();
  const int pp = pc.pipeline_parallel_degree, tp = pc.tensor_parallel_degree;
  const int sdp = pc.sharded_data_parallel_degree;
  if (pp < 1) return bad("parallel.pipeline_parallel_degree", "must be >= 1");
  if (tp < 1) return bad("parallel.tensor_parallel_degree", "must be >= 1");
  if (sdp < 1) return bad("parallel.sharded_data_parallel_degree", "must be >= 1");
  const InstanceType& inst = job.cluster.instance;
  if (tp > inst.fabric_gpus())
    return bad("parallel.tensor_parallel_degree",
               fmt::format("{} is larger than {} ({} GPUs)", tp,
                           inst.nvlink_domain_gpus > 0 ? "an NVLink domain" : "a node", inst.fabric_gpus()));
  if (world % (pp * tp) != 0)
    return bad("parallel", fmt::format("pipeline ({}) x tensor ({}) = {} does not divide the {} GPUs "
                                       "of the cluster", pp, tp, pp * tp, world));
  if (JobViolation v = check_context(job)) return v;
  const int dp = job.data_context_degree();
  if (dp % sdp != 0)
    return bad("parallel.sharded_data_parallel_degree",
               fmt::format("{} does not divide the data-parallel degree {} (= {} GPUs / (pp {} x tp {}){})",
                           sdp, dp, world, pp, tp, pc.context_parallel_degree > 1 ? ", context ranks included" : ""));
  if (m.heads % tp != 0)
    return bad("parallel.tensor_parallel_degree",
               fmt::format("{} does not divide the model's {} attention heads", tp, m.heads));
  if (m.kv_heads % tp != 0 && m.kv_heads >= tp)
    return bad("parallel.tensor_parallel_degree",
               fmt::format("{} does not divide the model's {} key/value heads", tp, m.kv_heads));
  if (m.ffn_hidden % tp != 0)
    return bad("parallel.tensor_parallel_degree",
               fmt::format("{} does not divide ffn_hidden {}", tp, m.ffn_hidden));
  return check_experts(job);
}

// The batch: micro-batches and accumulation >= 1, and the global batch divisible by them.
JobViolation check_batch(const Job& job) {
  const auto& pc = job.parallel;
  const auto& tc = job.training;
  const int dp = job.data_parallel_degree();
  if (pc.microbatches < 1) return bad("parallel.microbatches", "must be >= 1");
  if (tc.gradient_accumulation < 1) return bad("training.gradient_accumulation", "must be >= 1");
  if (tc.global_batch < 1) return bad("training.global_batch", "must be >= 1");
  const long per_step = static_cast<long>(dp) * pc.microbatches * tc.gradient_accumulation;
  if (tc.global_batch % per_step != 0)
    return bad("training.global_batch",
               fmt::format("{} is not divisible by data-parallel degree {} x microbatches {} x "
                           "gradient_accumulation {} = {}", tc.global_batch, dp, pc.microbatches,
                           tc.gradient_accumulation, per_step));
  return {};
}

// Uneven stages: one entry per stage (virtual_stages 1) or per model chunk (pp x
// virtual_stages), each >= 1 but the model's first and last chunk under interleaving
// (the embedding alone, the head alone, as Llama 3 ran), adding up to the model's layers.
JobViolation check_stage_layers(const Job& job) {
  const auto& pc = job.parallel;
  const auto& sl = pc.stage_layers;
  // The chunks' layers came from Megatron's layout string where the job gave one.
  const char* key = pc.pipeline_layout.empty() ? "parallel.stage_layers" : "parallel.pipeline_layout";
  const int pp = pc.pipeline_parallel_degree, v = pc.virtual_stages, n = static_cast<int>(sl.size());
  if (v == 1 && n != pp)
    return bad(key, fmt::format("has {} entries; pipeline_parallel_degree is {}", n, pp));
  if (v > 1 && n != pp * v)
    return bad(key,
               fmt::format("has {} entries; with virtual stages it lists every model chunk: "
                           "pipeline_parallel_degree x virtual_stages = {}",
                           n, pp * v));
  long sum = 0;
  for (int i = 0; i < n; ++i) {
    const bool end = v > 1 && (i == 0 || i == n - 1);
    if (sl[i] < (end ? 0 : 1))
      return bad(key,
                 fmt::format("{} {} has {} layers; {}", v > 1 ? "chunk" : "stage", i, sl[i],
                             v > 1 ? "only the first and last chunk may hold none" : "every stage needs >= 1"));
    sum += sl[i];
  }
  if (sum != job.model.layers)
    return bad(key, fmt::format("they hold {} layers; the model has {}", sum, job.model.layers));
  const bool empty_end = v > 1 && (sl.front() == 0 || sl.back() == 0);
  if (empty_end && pc.sharded_data_parallel_degree > 1)
    return bad(key, "a chunk without layers needs sharded_data_parallel_degree 1");
  if (empty_end && (pc.offload_activations || pc.offload_parameters))
    return bad(key, "a chunk without layers cannot offload");
  return {};
}

// Megatron's layout names each multi-token-prediction layer ('m', in the last chunk with
// the loss): as many as the model's mtp_layers, which sit with the head.
JobViolation check_layout_mtp(const Job& job) {
  const std::string& text = job.parallel.pipeline_layout;
  if (text.empty()) return {};
  int in_layout = 0;
  try {
    in_layout = parse_pipeline_layout(text).mtp_layers;
  } catch (const std::invalid_argument& e) {
    return bad("parallel.pipeline_layout", e.what());
  }
  const int mtp = job.model.mtp_layers;
  if (in_layout == mtp) return {};
  if (mtp == 0)
    return bad("parallel.pipeline_layout",
               fmt::format("has {} multi-token-prediction layer{} ('m'); the model has none (model.mtp_layers)",
                           in_layout, in_layout == 1 ? "" : "s"));
  return bad("parallel.pipeline_layout",
             fmt::format("has {} multi-token-prediction layer{} ('m'); the model has mtp_layers {}: give each "
                         "an 'm' in the last chunk, before the 'L'",
                         in_layout, in_layout == 1 ? "" : "s", mtp));
}

// A zero-bubble schedule defers each micro-batch's weight gradients (W) past its input
// gradients (B): what still keys on one whole backward is refused by name. The V-shaped
// ones need two stages or more and 2 p micro-batches (their warm-up's).
JobViolation check_zero_bubble(const Job& job) {
  const auto& pc = job.parallel;
  if (!splits_backward(pc.pipeline)) return {};
  if (v_shaped(pc.pipeline) && pc.pipeline_parallel_degree < 2)
    return bad("parallel.pipeline_parallel_degree", fmt::format("pipeline: {} needs pipeline_parallel_degree > 1",
                                                                to_string(pc.pipeline)));
  if (v_shaped(pc.pipeline) && pc.microbatches < 2 * pc.pipeline_parallel_degree)
    return bad("parallel.microbatches",
               fmt::format("pipeline: {} needs at least 2 x pipeline_parallel_degree = {} micro-batches (got {})",
                           to_string(pc.pipeline), 2 * pc.pipeline_parallel_degree, pc.microbatches));
  if (pc.lm_head_stage == LmHeadStage::first)
    return bad("parallel.lm_head_stage",
               fmt::format("first is not supported with pipeline: {} (the head's steps are placed by 1F1B's times)",
                           to_string(pc.pipeline)));
  if (pc.sharded_data_parallel_degree > 1)
    return bad("parallel.pipeline",
               fmt::format("{} needs sharded_data_parallel_degree 1 (each layer's reduce-scatter would wait for its "
                           "deferred W)",
                           to_string(pc.pipeline)));
  if (pc.offload_activations)
    return bad("parallel.pipeline",
               fmt::format("{} cannot offload activations (their reloads are timed by the whole backward)",
                           to_string(pc.pipeline)));
  return {};
}

// The pipeline: virtual stages, the layers' split over the stages, and where the LM head is.
JobViolation check_pipeline(const Job& job) {
  const auto& m = job.model;
  const auto& pc = job.parallel;
  const int pp = pc.pipeline_parallel_degree;
  if (pc.virtual_stages < 1) return bad("parallel.virtual_stages", "must be >= 1");
  if (v_shaped(pc.pipeline) && pc.virtual_stages != 2)
    return bad("parallel.virtual_stages",
               fmt::format("pipeline: {} runs two chunks a stage: virtual_stages 2 (got {})", to_string(pc.pipeline),
                           pc.virtual_stages));
  if (pc.virtual_stages > 1 && pc.pipeline != PipelineSchedule::one_f_one_b && !v_shaped(pc.pipeline))
    return bad("parallel.virtual_stages", "virtual stages need pipeline: interleaved (or zbv, dualpipev)");
  if (pc.virtual_stages > 1 && pp == 1)
    return bad("parallel.virtual_stages", "virtual stages need pipeline_parallel_degree > 1");
  if (!pc.stage_layers.empty()) {
    if (JobViolation v = check_stage_layers(job)) return v;
  } else if (m.layers % (pp * pc.virtual_stages) != 0) {
    return bad("parallel.pipeline_parallel_degree",
               fmt::format("the model's {} layers do not split into {} stages x {} virtual stages",
                           m.layers, pp, pc.virtual_stages));
  }
  if (JobViolation v = check_zero_bubble(job)) return v;
  if (JobViolation v = check_layout_mtp(job)) return v;
  if (pc.lm_head_stage == LmHeadStage::first) {
    if (pp < 2)
      return bad("parallel.lm_head_stage", "first needs pipeline_parallel_degree > 1");
    if (pc.virtual_stages != 1)
      return bad("parallel.lm_head_stage",
                 fmt::format("first needs virtual_stages 1 (got {})", pc.virtual_stages));
    if (!m.tied_embeddings)
      return bad("parallel.lm_head_stage",
                 "first places the head beside the embedding it shares: the model needs tied_embeddings");
  }
  return {};
}

// Checkpointing, the interleaved schedule's micro-batches, offloading, FlashAttention's
// precision and sequence parallelism: the knobs a search turns.
JobViolation check_memory(const Job& job) {
  const auto& m = job.model;
  const auto& pc = job.parallel;
  const auto& tc = job.training;
  const int pp = pc.pipeline_parallel_degree, tp = pc.tensor_parallel_degree;
  if (pc.checkpointed_layers < -1)
    return bad("parallel.checkpointed_layers", "must be >= 0, or -1 for every layer");
  if (pc.checkpointed_layers >= 0 && pc.activation_checkpointing == Checkpointing::none)
    return bad("parallel.checkpointed_layers",
               "chooses which layers are checkpointed: turn on activation_checkpointing (selective or full)");
  if (pc.virtual_stages > 1 && pc.microbatches % pp != 0)
    return bad("parallel.microbatches",
               fmt::format("interleaved 1F1B with virtual stages needs microbatches ({}) to be a "
                           "multiple of pipeline_parallel_degree ({})", pc.microbatches, pp));
  if (pc.active_microbatches < 0) return bad("parallel.active_microbatches", "must be >= 0");
  if (pc.activation_loading_horizon < 1)
    return bad("parallel.activation_loading_horizon", "must be >= 1");
  if (auto v = check_recompute_modules(job)) return v;
  if (pc.offload_activations && pc.activation_checkpointing == Checkpointing::none)
    return bad("parallel.offload_activations",
               "offloading moves checkpointed activations: turn on activation_checkpointing");
  if (pc.offload_parameters && pc.sharded_data_parallel_degree < 2)
    return bad("parallel.offload_parameters",
               "keeps the parameter shard on the host and gathers it from there: needs "
               "sharded_data_parallel_degree > 1");
  if (pc.offload_parameters && !pc.offload_optimizer)
    return bad("parallel.offload_parameters",
               "the parameters' shard is updated where the optimizer runs: turn on offload_optimizer as well");
  if (pc.offload_optimizer && job.cluster.instance.host_memory_bw <= 0)
    return bad("parallel.offload_optimizer",
               "the optimizer steps on the host: the cluster's instance_type needs host.memory_bw_GBps");
  if (pc.flash_attention && (tc.precision == Precision::fp32 || tc.precision == Precision::tf32) &&
      !job.cluster.instance.gpu.attention.flash_fp32)
    return bad("parallel.flash_attention",
               "FlashAttention needs fp16 or bf16 precision (fp32 only where the instance type's "
               "gpu.attention.flash_fp32 is true, as on the CPU)");
  if (pc.sequence_parallel && tp < 2)
    return bad("parallel.sequence_parallel", "splits the sequence over the tensor-parallel group: needs "
                                             "tensor_parallel_degree > 1");
  if (pc.tp_comm_overlap && tp > 1 && !pc.sequence_parallel)
    return bad("parallel.tp_comm_overlap", "overlaps the sequence-parallel all-gathers and reduce-scatters with "
                                           "their GEMMs: needs sequence_parallel (as Megatron's does)");
  if (pc.sequence_parallel && m.seq_len % tp != 0)
    return bad("parallel.sequence_parallel", fmt::format("the sequence length {} does not split over tensor "
                                                         "degree {}", m.seq_len, tp));
  return {};
}

// The training's own settings against the instance type: the fp8 recipe, the attention
// kernel and the precision's peak. No parallel layout breaks or mends them.
JobViolation check_training(const Job& job) {
  const auto& tc = job.training;
  if (tc.global_batch < 1) return bad("training.global_batch", "must be >= 1");
  if (tc.gradient_accumulation < 1) return bad("training.gradient_accumulation", "must be >= 1");
  if (tc.fp8_recipe == Fp8Recipe::current && tc.precision != Precision::fp8)
    return bad("training.fp8_recipe", fmt::format("current scales per-tensor fp8 operands; precision {} has {}",
                                                  to_string(tc.precision),
                                                  low_precision_gemms(tc.precision) ? "block scales, computed in its cast"
                                                                                    : "no fp8 GEMMs"));
  const bool half_moments = tc.moment_precision == Precision::bf16 || tc.moment_precision == Precision::fp16;
  if (tc.moment_precision != Precision::fp32 && (!half_moments || tc.optimizer_impl != OptimizerImpl::fused))
    return bad("training.moment_precision", "fp32, or bf16/fp16 with optimizer_impl fused (a precision-aware step)");
  if (tc.attention_impl && !(job.cluster.instance.gpu.attention.curve(*tc.attention_impl).max_efficiency > 0))
    return bad("training.attention_impl",
               fmt::format("{} has no measured {} curve in its instance type (gpu.attention: kernel {}{})",
                           job.cluster.instance.gpu.name, enum_name(*tc.attention_impl),
                           enum_name(job.cluster.instance.gpu.attention.kernel),
                           measured_kernels(job.cluster.instance.gpu.attention)));
  if (job.cluster.instance.gpu.peak_flops(tc.precision) <= 0)
    return bad("training.precision",
               fmt::format("{} has no {} peak in its instance type{}", job.cluster.instance.gpu.name,
                           to_string(tc.precision),
                           tc.precision == Precision::fp8 ? " (FP8 needs Hopper or later: p5.48xlarge, p5e.48xlarge)"
                           : low_precision_gemms(tc.precision)
                               ? " (MXFP8 and FP4 need Blackwell: p6-b200.48xlarge, p6e-gb200.36xlarge)"
                               : ""));
  return {};
}

// Gradient sharding (ZeRO-2) goes with the optimizer state's, over data-parallel ranks.
JobViolation check_gradient_sharding(const Job& job) {
  const ParallelConfig& pc = job.parallel;
  if (pc.shard_gradients && pc.sharded_data_parallel_degree > 1)
    return bad("parallel.shard_gradients",
               "sharded data parallelism already keeps a 1 / sharded degree slice of the gradients: drop one of the two");
  if (pc.shard_gradients && !pc.shard_optimizer_state)
    return bad("parallel.shard_gradients",
               "a rank keeps the gradient slice its optimizer-state slice updates (ZeRO-2): turn on "
               "shard_optimizer_state as well");
  return {};
}

// The sharding flavour's knobs (not a search's): each applies to its flavours only.
JobViolation check_sharding_knobs(const Job& job) {
  const ParallelConfig& pc = job.parallel;
  const ShardingConfig& s = pc.sharding;
  const bool fsdp = layer_unit(pc.sharding_flavor);
  const char* flavor = to_string(pc.sharding_flavor);
  if (fsdp) {
    const std::string why = fmt::format(
        "not a knob of sharding_flavor {} (its unit is the whole layer); it applies to smp and zero3", flavor);
    if (s.prefetch_bucket_size >= 0) return bad("parallel.sharding.prefetch_bucket_size", why);
    if (s.reduce_bucket_size >= 0) return bad("parallel.sharding.reduce_bucket_size", why);
    if (s.param_persistence_threshold >= 0) return bad("parallel.sharding.param_persistence_threshold", why);
  } else if (s.backward_prefetch != BackwardPrefetch::pre) {
    return bad("parallel.sharding.backward_prefetch",
               fmt::format("not a knob of sharding_flavor {}; it applies to fsdp and fsdp2", flavor));
  }
  return {};
}

// parallel.sharding: a knob the flavour does not have is a mistake, not a no-op.
JobViolation check_sharding(const Job& job) {
  if (JobViolation v = check_gradient_sharding(job)) return v;
  return check_sharding_knobs(job);
}

}  // namespace

JobViolation check_job(const Job& job) {
  for (auto check : {check_degrees, check_batch, check_pipeline, check_memory, check_training, check_sharding})
    if (JobViolation v = check(job)) return v;
  return {};
}

JobViolation check_job_settings(const Job& job) {
  for (auto check : {check_training, check_sharding_knobs})
    if (JobViolation v = check(job)) return v;
  return {};
}

JobViolation check_job(const Job& job, JobRules rules) {
  return rules == JobRules::every ? check_job(job) : check_job_settings(job);
}

}  // namespace partune
