// Why a configuration does not fit, and what to change (fit_hint.hpp). Every knob named
// is one the job has not turned yet and one that shrinks the group it is listed under.
#include "partune/costmodel/fit_hint.hpp"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/units.hpp"

namespace partune {

namespace {

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / units::GiB); }

// "a", "a or b", "a, b, or c".
std::string either(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) s += items.size() == 2 ? " or " : i + 1 == items.size() ? ", or " : ", ";
    s += items[i];
  }
  return s;
}

// Fewer sequences per micro-batch: the stored activations and the logits scale with it.
std::string smaller_microbatch(const Job& job) {
  return fmt::format("fewer sequences per micro-batch ({} now: raise gradient_accumulation or microbatches)",
                     job.microbatch_size());
}

bool flash_allowed(const Job& job) {
  const Precision p = job.training.precision;
  return (p != Precision::fp32 && p != Precision::tf32) || job.cluster.instance.gpu.attention.flash_fp32;
}

// `group`: the activations group's bytes (stored and the recompute working set).
std::vector<std::string> activation_knobs(const Job& job, const MemoryBreakdown& m, double group) {
  const ParallelConfig& pc = job.parallel;
  const Checkpointing policy = pc.activation_checkpointing;
  const int layers = job.layers_on_stage(m.stage);
  const int checkpointed = policy == Checkpointing::none ? 0 : job.checkpointed_layers_on_stage(m.stage);
  std::vector<std::string> k;
  // The s x s scores sit in the layers that keep everything, or in the recompute's working set.
  const bool scores_here = checkpointed < layers || m.activation_working >= 0.25 * group;
  const double share = attention_score_share(job);
  if (flash_allowed(job) && share >= 0.1 && scores_here)
    k.push_back(fmt::format("flash_attention: true (the {0}x{0} attention scores are {1:.0f}% of a layer's activations)",
                            job.model.seq_len, 100.0 * share));
  if (policy == Checkpointing::none)
    k.push_back(pc.flash_attention ? "activation_checkpointing: full" : "activation_checkpointing: full (or selective)");
  else if (policy == Checkpointing::selective || policy == Checkpointing::op || policy == Checkpointing::dots)
    k.push_back("activation_checkpointing: full");
  else if (checkpointed < layers)
    k.push_back(fmt::format("checkpointed_layers: -1 (all {} layers of the stage, {} now)", layers, checkpointed));
  if (policy != Checkpointing::none && checkpointed > 0 && !pc.offload_activations)
    k.push_back("offload_activations: true");
  if (job.microbatch_size() > 1) k.push_back(smaller_microbatch(job));
  if (pc.tensor_parallel_degree > 1 && !pc.sequence_parallel) k.push_back("sequence_parallel: true");
  // A long sequence: split it over more ranks (each keeps s / cp of every layer).
  const int cp = pc.context_parallel_degree, axis = job.data_context_degree();
  if (job.model.seq_len >= 16384 && axis % (2 * cp) == 0 && job.model.seq_len % (4 * cp) == 0)
    k.push_back(fmt::format("context_parallel_degree: {} (each rank keeps {} of the {} tokens; {} now)", 2 * cp,
                            job.model.seq_len / (2 * cp), job.model.seq_len, cp));
  if (k.empty() && pc.pipeline_parallel_degree < job.model.layers)
    k.push_back("a higher pipeline_parallel_degree (fewer layers a stage)");
  if (k.empty()) k.push_back("a shorter seq_len");
  return k;
}

std::vector<std::string> state_knobs(const Job& job, const MemoryBreakdown& m) {
  const ParallelConfig& pc = job.parallel;
  const int dp = job.data_context_degree(), sdp = pc.sharded_data_parallel_degree;
  const int ep = pc.expert_parallel_degree;
  std::vector<std::string> k;
  if (dp > 1 && sdp == 1 && !pc.shard_optimizer_state && m.optimizer_states > 0)
    k.push_back(fmt::format("shard_optimizer_state: true (over the {} data-parallel ranks)", dp));
  if (dp > 1 && sdp == 1 && pc.shard_optimizer_state && !pc.shard_gradients && m.gradients > 0)
    k.push_back(fmt::format("shard_gradients: true (each rank keeps 1/{} of the gradients)", dp));
  // Sharded data parallelism is not combined with expert parallelism.
  if (dp > 1 && sdp < dp && ep == 1) k.push_back(fmt::format("sharded_data_parallel_degree up to {}", dp));
  if (job.model.is_moe() && ep < std::min(job.model.experts, dp))
    k.push_back(fmt::format("a higher expert_parallel_degree ({} now)", ep));
  const bool tp_room = pc.tensor_parallel_degree < job.cluster.instance.fabric_gpus();
  const bool pp_room = pc.pipeline_parallel_degree < job.model.layers;
  if (tp_room && pp_room)
    k.push_back("a higher tensor_parallel_degree or pipeline_parallel_degree");
  else if (tp_room || pp_room)
    k.push_back(tp_room ? "a higher tensor_parallel_degree" : "a higher pipeline_parallel_degree");
  if (!pc.offload_optimizer && job.cluster.instance.host_memory_bw > 0) k.push_back("offload_optimizer: true");
  if (k.empty()) k.push_back("more GPUs");
  return k;
}

std::vector<std::string> logit_knobs(const Job& job) {
  const ParallelConfig& pc = job.parallel;
  std::vector<std::string> k;
  if (job.microbatch_size() > 1) k.push_back(smaller_microbatch(job));
  if (mixed_precision(job.training.precision) && job.training.loss_precision == LossPrecision::fp32)
    k.push_back("loss_precision: training (2 bytes a logit instead of 6)");
  if (pc.pipeline == PipelineSchedule::gpipe && pc.pipeline_parallel_degree > 1 && !job.lm_head_on_first_stage())
    k.push_back("pipeline: interleaved (1F1B keeps one micro-batch's logits)");
  if (k.empty()) k.push_back("a shorter seq_len");
  return k;
}

}  // namespace

double attention_score_share(const Job& job) {
  if (job.parallel.flash_attention) return 0.0;
  const PlanConfig c = plan_config(job);
  // Layer 0's kind: a layer with experts when the model has them.
  const LayerPlan plan = job.model.is_moe() ? moe_layer_plan(job.model, c) : transformer_layer_plan(job.model, c);
  const PlanOp& core = plan.op(PlanOpRole::attention);
  const double full = plan.stored_bytes(Checkpointing::none);
  return full > 0 ? core.recomputable / full : 0.0;
}

std::string fit_hint(const Job& job, const MemoryBreakdown& m) {
  struct Group {
    const char* name;
    double bytes;
    int id;
  };
  const double activations = m.activations + m.transient() - m.logits;
  std::vector<Group> groups = {
      {"activations", activations, 0},
      {"model states", m.parameters + m.gathered_parameters + m.gradients + m.optimizer_states, 1},
      {"logits", m.logits, 2}};
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.bytes > b.bytes; });
  std::string s = "to fit, shrink";
  const double total = m.total();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const Group& g = groups[i];
    if (i > 0 && (g.bytes < 0.25 * total || g.bytes <= 0)) continue;
    const std::vector<std::string> knobs = g.id == 0   ? activation_knobs(job, m, activations)
                                           : g.id == 1 ? state_knobs(job, m)
                                                       : logit_knobs(job);
    s += fmt::format("{} the {} ({}) with {}", i > 0 ? ";" : "", g.name, gib(g.bytes), either(knobs));
  }
  return s;
}

std::string not_fit_reason(const Job& job, const MemoryBreakdown& m, double capacity) {
  struct Part {
    const char* name;
    double bytes;
  };
  // The recompute working set counts only where it exceeds the logits it never coexists with.
  Part parts[] = {{"activations", m.activations + m.transient() - m.logits},
                  {"optimizer states", m.optimizer_states},
                  {"parameters", m.parameters + m.gathered_parameters},
                  {"gradients", m.gradients},
                  {"logits", m.logits}};
  std::stable_sort(std::begin(parts), std::end(parts), [](auto& a, auto& b) { return a.bytes > b.bytes; });
  return fmt::format("stage {} needs {} of {} HBM; largest parts: {} {}, {} {}; {}", m.stage, gib(m.total()),
                     gib(capacity), parts[0].name, gib(parts[0].bytes), parts[1].name, gib(parts[1].bytes),
                     fit_hint(job, m));
}

}  // namespace partune
