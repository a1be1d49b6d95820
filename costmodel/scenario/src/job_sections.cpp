// The job file's training and parallel sections (scenario.cpp reads the rest of a job):
// each key's range, default and the rules a single section can check.
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/pipeline_layout.hpp"
#include "scenario_internal.hpp"

namespace partune::detail {

namespace {


CollectiveAlgorithm parse_algorithm(const Reader& r, const char* key, CollectiveAlgorithm fallback) {
  return get_enum(r, key, fallback);
}

// parallel.sharding: the flavour's knobs, each absent one left at its public default.
void parse_sharding(const Reader& r, ShardingConfig& s) {
  r.require_map();
  r.allow_only({"prefetch_bucket_size", "reduce_bucket_size", "param_persistence_threshold",
                "hierarchical_allgather", "backward_prefetch", "gather_copies"});
  constexpr double kMaxElements = 1e15;
  if (r.has("prefetch_bucket_size")) s.prefetch_bucket_size = r.get_in_range("prefetch_bucket_size", 0, kMaxElements);
  if (r.has("reduce_bucket_size")) s.reduce_bucket_size = r.get_in_range("reduce_bucket_size", 1, kMaxElements);
  if (r.has("param_persistence_threshold"))
    s.param_persistence_threshold = r.get_in_range("param_persistence_threshold", 0, kMaxElements);
  if (r.has("hierarchical_allgather")) s.hierarchical_allgather = r.get_bool("hierarchical_allgather", false) ? 1 : 0;
  s.backward_prefetch = get_enum(r, "backward_prefetch", BackwardPrefetch::pre);
  if (r.has("gather_copies")) s.gather_copies = r.get_bool("gather_copies", false) ? 1 : 0;
}

// parallel.recompute_modules: a list of Megatron's module names (or one string of them
// separated by commas, as --set writes it); only under selective checkpointing.
RecomputeModules parse_recompute_modules(const Reader& r, Checkpointing policy) {
  const char* key = "recompute_modules";
  if (!r.has(key)) return kDefaultRecomputeModules;
  if (policy != Checkpointing::selective)
    r.fail(key, "chooses what selective checkpointing recomputes: set activation_checkpointing: selective");
  const YAML::Node n = r.node()[key];
  std::vector<std::string> names;
  if (n.IsSequence()) {
    for (std::size_t i = 0; i < n.size(); ++i) {
      if (!n[i].IsScalar()) r.fail(key, "entry " + std::to_string(i) + " is not a module name");
      names.push_back(n[i].Scalar());
    }
  } else if (n.IsScalar()) {
    std::string text = n.Scalar();
    for (std::size_t start = 0; start <= text.size();) {
      const std::size_t comma = std::min(text.find(',', start), text.size());
      names.push_back(text.substr(start, comma - start));
      start = comma + 1;
    }
  } else {
    r.fail(key, "expected a list of module names such as [mla_up_proj, mlp]");
  }
  if (names.empty()) r.fail(key, "is empty: leave it out for the attention core alone, or use activation_checkpointing: none");
  RecomputeModules set = 0;
  for (const std::string& name : names) {
    const auto m = enum_value<RecomputeModule>(name);
    if (!m) r.fail(key, "'" + name + "' is not one of: " + enum_name_list<RecomputeModule>());
    set = static_cast<RecomputeModules>(set | module_bit(*m));
  }
  return set;
}

// parallel.pipeline_layout: Megatron's layout string gives the chunks' layers (stage_layers)
// and the model chunks a stage runs (virtual_stages).
void parse_pipeline_layout_key(const Reader& r, ParallelConfig& p) {
  const char* key = "pipeline_layout";
  if (r.has("stage_layers")) r.fail(key, "gives the chunks' layers as stage_layers does: keep one of them");
  p.pipeline_layout = r.get_string(key);
  PipelineLayout layout;
  try {
    layout = parse_pipeline_layout(p.pipeline_layout);
  } catch (const std::invalid_argument& e) {
    r.fail(key, e.what());
  }
  // Its 'm's (the MTP layers, with the loss in the last chunk) are checked against the
  // model's mtp_layers by check_job.
  const int chunks = static_cast<int>(layout.chunk_layers.size()), pp = p.pipeline_parallel_degree;
  if (chunks % pp != 0)
    r.fail(key, fmt::format("{} model chunks do not split over pipeline_parallel_degree {}", chunks, pp));
  if (r.has("virtual_stages") && p.virtual_stages != chunks / pp)
    r.fail(key, fmt::format("{} model chunks over {} stages are {} a stage, not virtual_stages {}", chunks, pp,
                            chunks / pp, p.virtual_stages));
  p.virtual_stages = chunks / pp;
  p.stage_layers = layout.chunk_layers;
}


}  // namespace

void parse_training(const Reader& r, TrainingConfig& t) {
  r.allow_only({"global_batch", "precision", "optimizer", "gradient_accumulation", "loss_precision", "kernel_fusion",
                "optimizer_impl", "cuda_graphs", "attention_impl", "fp8_recipe", "moment_precision"});
  t.global_batch = r.get_int("global_batch", 1, limits::kMaxGlobalBatch);
  t.precision = get_enum(r, "precision", Precision::fp16);
  t.optimizer = get_enum(r, "optimizer", Optimizer::adam);
  t.gradient_accumulation = r.get_int("gradient_accumulation", 1, limits::kMaxGradientAccumulation, 1);
  t.loss_precision = get_enum(r, "loss_precision", LossPrecision::fp32);
  t.kernel_fusion = get_enum(r, "kernel_fusion", KernelFusion::fused);
  t.optimizer_impl = get_enum(r, "optimizer_impl", OptimizerImpl::fused);
  t.cuda_graphs = r.get_bool("cuda_graphs", false);
  t.fp8_recipe = get_enum(r, "fp8_recipe", Fp8Recipe::delayed);
  t.moment_precision = get_enum(r, "moment_precision", Precision::fp32);
  if (r.has("attention_impl")) t.attention_impl = get_enum(r, "attention_impl", AttentionKernel::flash2);
}

void parse_parallel(const Reader& r, ParallelConfig& p) {
  r.allow_only({"pipeline_parallel_degree", "tensor_parallel_degree", "sharded_data_parallel_degree",
                "data_parallel_degree", "microbatches", "active_microbatches", "pipeline",
                "virtual_stages", "placement_strategy", "activation_checkpointing",
                "offload_activations", "activation_loading_horizon", "shard_optimizer_state", "shard_gradients",
                "offload_optimizer", "offload_parameters",
                "flash_attention", "sequence_parallel", "tp_comm_overlap", "overlap_p2p_comm", "grad_reduce_in_fp32", "sharded_collective", "data_parallel_collective",
                "sharding_flavor", "sharding", "stage_layers",
                "lm_head_stage", "checkpointed_layers", "recompute_modules", "pipeline_layout", "expert_parallel_degree",
                "expert_tensor_parallel_degree", "moe_token_dispatcher", "moe_a2a_overlap",
                "context_parallel_degree",
                "cp_comm_type", "context_a2a_degree"});
  p.pipeline_parallel_degree = r.get_int("pipeline_parallel_degree", 1, limits::kMaxLayers, 1);
  p.tensor_parallel_degree = r.get_int("tensor_parallel_degree", 1, limits::kMaxGpusPerNode, 1);
  p.sharded_data_parallel_degree = r.get_int("sharded_data_parallel_degree", 1, limits::kMaxRanks, 1);
  p.expert_parallel_degree = r.get_int("expert_parallel_degree", 1, limits::kMaxRanks, 1);
  p.expert_tensor_parallel_degree = r.get_int("expert_tensor_parallel_degree", 1, limits::kMaxRanks, 0);
  p.moe_token_dispatcher = get_enum(r, "moe_token_dispatcher", MoeDispatcher::alltoall);
  p.moe_a2a_overlap = r.get_bool("moe_a2a_overlap", false);
  p.context_parallel_degree = r.get_int("context_parallel_degree", 1, limits::kMaxRanks, 1);
  p.cp_comm_type = get_enum(r, "cp_comm_type", ContextComm::p2p);
  p.context_a2a_degree = r.get_int("context_a2a_degree", 0, limits::kMaxRanks, 0);
  p.microbatches = r.get_int("microbatches", 1, limits::kMaxMicrobatches, 1);
  p.active_microbatches = r.get_int("active_microbatches", 0, limits::kMaxMicrobatches, 0);
  p.pipeline = get_enum(r, "pipeline", PipelineSchedule::one_f_one_b);
  // A V (zbv, dualpipev) runs two chunks a stage: its default.
  p.virtual_stages = r.get_int("virtual_stages", 1, limits::kMaxVirtualStages, v_shaped(p.pipeline) ? 2 : 1);
  try {
    p.placement_strategy = PlacementOrder::parse(r.get_string("placement_strategy", "cluster"));
  } catch (const std::invalid_argument& e) {
    r.fail("placement_strategy", e.what());
  }
  p.activation_checkpointing = get_enum(r, "activation_checkpointing", Checkpointing::none);
  p.offload_activations = r.get_bool("offload_activations", false);
  p.activation_loading_horizon = r.get_int("activation_loading_horizon", 1, limits::kMaxLayers, 4);
  p.shard_optimizer_state = r.get_bool("shard_optimizer_state", false);
  p.shard_gradients = r.get_bool("shard_gradients", false);
  p.offload_optimizer = r.get_bool("offload_optimizer", false);
  p.offload_parameters = r.get_bool("offload_parameters", false);
  p.flash_attention = r.get_bool("flash_attention", false);
  p.sequence_parallel = r.get_bool("sequence_parallel", false);
  p.tp_comm_overlap = r.get_bool("tp_comm_overlap", false);
  p.overlap_p2p_comm = r.get_bool("overlap_p2p_comm", false);
  p.grad_reduce_in_fp32 = r.get_bool("grad_reduce_in_fp32", false);
  p.sharded_collective = parse_algorithm(r, "sharded_collective", CollectiveAlgorithm::ring);
  p.data_parallel_collective = parse_algorithm(r, "data_parallel_collective", CollectiveAlgorithm::ring);
  p.sharding_flavor = get_enum(r, "sharding_flavor", ShardingFlavor::smp);
  if (r.has("sharding")) parse_sharding(r.child("sharding"), p.sharding);
  p.stage_layers = r.get_int_list("stage_layers", 0, limits::kMaxLayers, limits::kMaxLayers);
  p.lm_head_stage = get_enum(r, "lm_head_stage", LmHeadStage::last);
  p.checkpointed_layers = r.get_int("checkpointed_layers", -1, limits::kMaxLayers, -1);
  p.recompute_modules = parse_recompute_modules(r, p.activation_checkpointing);
  if (r.has("pipeline_layout")) parse_pipeline_layout_key(r, p);
}

}  // namespace partune::detail
