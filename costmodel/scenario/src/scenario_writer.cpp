#include "partune/costmodel/scenario_writer.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>

#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/units.hpp"

namespace partune {

namespace {

YAML::Node collective_node(const CollectiveProfile& c) {
  YAML::Node x;
  x["net_efficiency"] = c.net_efficiency;
  if (c.intra_efficiency != 1.0) x["intra_efficiency"] = c.intra_efficiency;
  if (c.reduce_scatter_as_all_reduce) x["reduce_scatter_as_all_reduce"] = true;
  x["compute_overlap"] = c.compute_overlap;
  if (c.launch_latency > 0) x["launch_us"] = c.launch_latency / units::us;
  return x;
}

// Every key parse_instance_type reads, in the units its key names.
YAML::Node instance_type_node(const InstanceType& it) {
  YAML::Node n;
  n["kind"] = "instance_type";
  n["name"] = it.name;
  n["gpus_per_node"] = it.gpus_per_node;
  const GpuProfile& g = it.gpu;
  n["gpu"]["name"] = g.name;
  n["gpu"]["peak_tflops"]["fp32"] = g.peak_flops_fp32 / units::tera;
  n["gpu"]["peak_tflops"]["tf32"] = g.peak_flops_tf32 / units::tera;
  n["gpu"]["peak_tflops"]["fp16"] = g.peak_flops_fp16 / units::tera;
  n["gpu"]["peak_tflops"]["bf16"] = g.peak_flops_bf16 / units::tera;
  if (g.peak_flops_fp8 > 0) n["gpu"]["peak_tflops"]["fp8"] = g.peak_flops_fp8 / units::tera;
  if (g.peak_flops_mxfp8 > 0) n["gpu"]["peak_tflops"]["mxfp8"] = g.peak_flops_mxfp8 / units::tera;
  if (g.peak_flops_fp4 > 0) n["gpu"]["peak_tflops"]["fp4"] = g.peak_flops_fp4 / units::tera;
  n["gpu"]["hbm_GiB"] = g.hbm_bytes / units::GiB;
  n["gpu"]["hbm_bw_GBps"] = g.hbm_bw / units::giga;
  n["gpu"]["hbm_efficiency"] = g.hbm_efficiency;
  n["gpu"]["kernel_overhead_us"] = g.kernel_overhead / units::us;
  if (g.strided_efficiency > 0) n["gpu"]["strided_efficiency"] = g.strided_efficiency;
  if (g.norm_efficiency > 0) n["gpu"]["norm_efficiency"] = g.norm_efficiency;
  if (g.copy_efficiency > 0) n["gpu"]["copy_efficiency"] = g.copy_efficiency;
  if (g.transpose_efficiency > 0) n["gpu"]["transpose_efficiency"] = g.transpose_efficiency;
  if (g.dispatch > 0) n["gpu"]["dispatch_us"] = g.dispatch / units::us;
  if (g.layer_overhead_fwd > 0 || g.layer_overhead_bwd > 0) {
    n["gpu"]["layer_overhead_us"]["forward"] = g.layer_overhead_fwd / units::us;
    n["gpu"]["layer_overhead_us"]["backward"] = g.layer_overhead_bwd / units::us;
  }
  n["gpu"]["reserved_GiB"] = g.reserved_bytes / units::GiB;
  n["gpu"]["gemm"]["max_efficiency"] = g.gemm.max_efficiency;
  n["gpu"]["gemm"]["tile"] = g.gemm.tile;
  n["gpu"]["gemm"]["sm_count"] = g.gemm.sm_count;
  n["gpu"]["gemm"]["k_half"] = g.gemm.k_half;
  if (g.gemm.fp8_max_efficiency > 0) n["gpu"]["gemm"]["fp8_max_efficiency"] = g.gemm.fp8_max_efficiency;
  if (g.gemm.fp4_max_efficiency > 0) n["gpu"]["gemm"]["fp4_max_efficiency"] = g.gemm.fp4_max_efficiency;
  n["gpu"]["attention"]["kernel"] = enum_name(g.attention.kernel);
  n["gpu"]["attention"]["flash_efficiency"] = g.attention.flash_efficiency;
  if (g.attention.flash_seq_half > 0) n["gpu"]["attention"]["flash_seq_half"] = g.attention.flash_seq_half;
  if (g.attention.flash_head_dim_half > 0)
    n["gpu"]["attention"]["flash_head_dim_half"] = g.attention.flash_head_dim_half;
  for (const auto& [k, name] : enum_names<AttentionKernel>()) {
    const FlashCurve& c = g.attention.kernels[static_cast<std::size_t>(k)];
    if (k == g.attention.kernel || !(c.max_efficiency > 0)) continue;
    YAML::Node curve = n["gpu"]["attention"]["kernels"][name];
    curve["max_efficiency"] = c.max_efficiency;
    if (c.seq_half > 0) curve["seq_half"] = c.seq_half;
    if (c.head_dim_half > 0) curve["head_dim_half"] = c.head_dim_half;
  }
  if (g.attention.flash_fp32) n["gpu"]["attention"]["flash_fp32"] = true;
  n["gpu"]["attention"]["score_bmm_efficiency"] = g.attention.score_bmm_efficiency;
  n["gpu"]["attention"]["score_bytes_fwd"] = g.attention.score_bytes_fwd;
  n["gpu"]["attention"]["score_bytes_bwd"] = g.attention.score_bytes_bwd;
  n["intra_node"]["fabric"] = it.intra_node_fabric;
  n["intra_node"]["bw_GBps"] = it.intra_node.bw / units::giga;
  n["intra_node"]["latency_us"] = it.intra_node.latency / units::us;
  n["intra_node"]["efficiency"] = it.intra_node.efficiency;
  if (it.nvlink_domain_gpus > 0) n["intra_node"]["domain_gpus"] = it.nvlink_domain_gpus;
  n["network"]["nics_per_node"] = it.nics_per_node;
  n["network"]["nic_bw_Gbps"] = it.nic.bw * 8 / units::giga;
  n["network"]["latency_us"] = it.nic.latency / units::us;
  n["network"]["efficiency"] = it.nic.efficiency;
  n["pcie"]["bw_GBps"] = it.pcie_bw / units::giga;
  n["pcie"]["gpus_per_switch"] = it.gpus_per_pcie_switch;
  n["host"]["cores"] = it.host_cores;
  if (it.host_all_busy_speed < 1.0) n["host"]["all_busy_speed"] = it.host_all_busy_speed;
  n["host"]["memory_GiB"] = it.host_memory_bytes / units::GiB;
  if (it.host_memory_bw > 0) n["host"]["memory_bw_GBps"] = it.host_memory_bw / units::giga;
  n["collectives"]["ring"] = collective_node(it.ring);
  n["collectives"]["tree"] = collective_node(it.tree);
  n["collectives"]["all_to_all"] = collective_node(it.all_to_all);
  if (it.nccl.arch != NcclArch::none) {
    n["collectives"]["nccl"]["arch"] = enum_name(it.nccl.arch);
    n["collectives"]["nccl"]["channels"] = it.nccl.channels;
    n["collectives"]["nccl"]["net_channels"] = it.nccl.net_channels;
    if (it.nccl.nvls_efficiency > 0) n["collectives"]["nccl"]["nvls_efficiency"] = it.nccl.nvls_efficiency;
  }
  return n;
}

// Emits a node as `out << node` would, with the comment of each dotted key path after its
// value (mappings are walked; scalars and sequences are emitted whole).
void emit_commented(YAML::Emitter& out, const YAML::Node& node, const YamlComments& comments,
                    const std::string& path) {
  if (!node.IsMap()) {
    out << node;
    return;
  }
  out << YAML::BeginMap;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string key_path = path.empty() ? key : path + "." + key;
    out << YAML::Key << key << YAML::Value;
    emit_commented(out, kv.second, comments, key_path);
    const auto c = comments.keys.find(key_path);
    if (c != comments.keys.end()) out << YAML::Comment(c->second);
  }
  out << YAML::EndMap;
}

std::string comment_lines(const std::string& text) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out += line.empty() ? "#\n" : "# " + line + "\n";
  return out;
}

YAML::Node model_node(const ModelSpec& m) {
  YAML::Node model;
  model["name"] = m.name;
  model["layers"] = m.layers;
  model["hidden"] = m.hidden;
  model["heads"] = m.heads;
  if (m.is_mla()) {
    model["q_lora_rank"] = m.q_lora_rank;
    model["kv_lora_rank"] = m.kv_lora_rank;
    model["qk_rope_head_dim"] = m.qk_rope_head_dim;
    model["qk_nope_head_dim"] = m.qk_nope_head_dim;
    model["v_head_dim"] = m.v_head_dim;
  } else {
    model["kv_heads"] = m.kv_heads;
  }
  if (m.attention_head_dim > 0) model["head_dim"] = m.attention_head_dim;
  if (m.qk_norm) model["qk_norm"] = true;
  if (m.sliding_window > 0) model["sliding_window"] = m.sliding_window;
  if (m.full_attention_every > 0) model["full_attention_every"] = m.full_attention_every;
  if (m.attention_sinks) model["attention_sinks"] = true;
  model["ffn_hidden"] = m.ffn_hidden;
  model["vocab"] = m.vocab;
  model["seq_len"] = m.seq_len;
  model["tied_embeddings"] = m.tied_embeddings;
  model["attention"] = enum_name(m.attention);
  // The block's variants only where they are not GPT's, so a GPT job reads as before.
  if (m.mlp != MlpKind::gelu) model["mlp"] = enum_name(m.mlp);
  if (m.norm != NormKind::layernorm) model["norm"] = enum_name(m.norm);
  if (m.positions != PositionKind::learned) model["positions"] = enum_name(m.positions);
  if (!m.bias) model["bias"] = false;
  if (m.dropout != ModelSpec{}.dropout) model["dropout"] = m.dropout;
  if (m.is_moe()) {
    model["experts"] = m.experts;
    model["experts_per_token"] = m.experts_per_token;
    model["moe_every"] = m.moe_every;
    model["expert_ffn_hidden"] = m.expert_ffn_hidden;
    model["capacity_factor"] = m.capacity_factor;
    if (m.shared_expert_ffn_hidden > 0) model["shared_expert_ffn_hidden"] = m.shared_expert_ffn_hidden;
    if (m.first_dense_layers > 0) model["first_dense_layers"] = m.first_dense_layers;
    if (m.expert_load_skew > 0) model["expert_load_skew"] = m.expert_load_skew;
    if (m.router_groups > 0) {
      model["router_groups"] = m.router_groups;
      model["router_group_topk"] = m.router_group_topk;
    }
  }
  if (m.mtp_layers > 0) model["mtp_layers"] = m.mtp_layers;
  return model;
}

YAML::Node parallel_node(const ParallelConfig& pc) {
  YAML::Node p;
  p["pipeline_parallel_degree"] = pc.pipeline_parallel_degree;
  p["tensor_parallel_degree"] = pc.tensor_parallel_degree;
  p["sharded_data_parallel_degree"] = pc.sharded_data_parallel_degree;
  if (pc.expert_parallel_degree > 1) p["expert_parallel_degree"] = pc.expert_parallel_degree;
  if (pc.expert_tensor_parallel_degree > 0) p["expert_tensor_parallel_degree"] = pc.expert_tensor_parallel_degree;
  if (pc.moe_token_dispatcher != MoeDispatcher::alltoall) p["moe_token_dispatcher"] = enum_name(pc.moe_token_dispatcher);
  if (pc.moe_a2a_overlap) p["moe_a2a_overlap"] = true;
  if (pc.context_parallel_degree > 1) {
    p["context_parallel_degree"] = pc.context_parallel_degree;
    p["cp_comm_type"] = enum_name(pc.cp_comm_type);
    if (pc.context_a2a_degree > 0) p["context_a2a_degree"] = pc.context_a2a_degree;
  }
  p["microbatches"] = pc.microbatches;
  if (pc.active_microbatches > 0) p["active_microbatches"] = pc.active_microbatches;
  p["pipeline"] = enum_name(pc.pipeline);
  p["virtual_stages"] = pc.virtual_stages;
  if (!pc.pipeline_layout.empty()) {
    p["pipeline_layout"] = pc.pipeline_layout;
  } else if (!pc.stage_layers.empty()) {
    YAML::Node layers(YAML::NodeType::Sequence);
    for (int l : pc.stage_layers) layers.push_back(l);
    layers.SetStyle(YAML::EmitterStyle::Flow);
    p["stage_layers"] = layers;
  }
  p["lm_head_stage"] = enum_name(pc.lm_head_stage);
  if (pc.checkpointed_layers >= 0) p["checkpointed_layers"] = pc.checkpointed_layers;
  p["placement_strategy"] = pc.placement_strategy.name();
  p["activation_checkpointing"] = enum_name(pc.activation_checkpointing);
  if (pc.activation_checkpointing == Checkpointing::selective && pc.recompute_modules != kDefaultRecomputeModules) {
    YAML::Node modules(YAML::NodeType::Sequence);
    for (const auto& [m, name] : enum_names<RecomputeModule>())
      if (has_module(pc.recompute_modules, m)) modules.push_back(name);
    modules.SetStyle(YAML::EmitterStyle::Flow);
    p["recompute_modules"] = modules;
  }
  p["offload_activations"] = pc.offload_activations;
  p["activation_loading_horizon"] = pc.activation_loading_horizon;
  if (pc.offload_optimizer) p["offload_optimizer"] = true;
  if (pc.offload_parameters) p["offload_parameters"] = true;
  p["shard_optimizer_state"] = pc.shard_optimizer_state;
  if (pc.shard_gradients) p["shard_gradients"] = true;
  p["flash_attention"] = pc.flash_attention;
  if (pc.sequence_parallel) p["sequence_parallel"] = true;
  if (pc.tp_comm_overlap) p["tp_comm_overlap"] = true;
  if (pc.overlap_p2p_comm) p["overlap_p2p_comm"] = true;
  if (pc.grad_reduce_in_fp32) p["grad_reduce_in_fp32"] = true;
  p["sharded_collective"] = enum_name(pc.sharded_collective);
  p["data_parallel_collective"] = enum_name(pc.data_parallel_collective);
  if (pc.sharding_flavor != ShardingFlavor::smp) p["sharding_flavor"] = enum_name(pc.sharding_flavor);
  const ShardingConfig& sc = pc.sharding;
  YAML::Node sharding;
  if (sc.prefetch_bucket_size >= 0) sharding["prefetch_bucket_size"] = sc.prefetch_bucket_size;
  if (sc.reduce_bucket_size >= 0) sharding["reduce_bucket_size"] = sc.reduce_bucket_size;
  if (sc.param_persistence_threshold >= 0) sharding["param_persistence_threshold"] = sc.param_persistence_threshold;
  if (sc.hierarchical_allgather >= 0) sharding["hierarchical_allgather"] = sc.hierarchical_allgather == 1;
  if (sc.backward_prefetch != BackwardPrefetch::pre) sharding["backward_prefetch"] = enum_name(sc.backward_prefetch);
  if (sc.gather_copies >= 0) sharding["gather_copies"] = sc.gather_copies == 1;
  if (sharding.size() > 0) p["sharding"] = sharding;
  return p;
}

}  // namespace

std::string instance_type_yaml(const InstanceType& it, const YamlComments& comments) {
  YAML::Emitter out;
  emit_commented(out, instance_type_node(it), comments, "");
  return comment_lines(comments.header) + out.c_str() + "\n";
}

std::string job_yaml(const Job& job, const std::string& origin_note) {
  YAML::Node root;
  root["kind"] = "job";
  root["name"] = job.name;
  root["model"] = model_node(job.model);
  const auto presets = list_presets("clusters");
  // By name only when it is the preset as shipped: an overridden one (`{base: local-cpu,
  // intra_node: ...}`) is written whole. With a named collective stack its profiles are
  // that stack's, which the name gives back, so only the rest is compared.
  bool preset = std::find(presets.begin(), presets.end(), job.cluster.instance.name) != presets.end();
  if (preset) {
    const InstanceType shipped = load_instance_type(job.cluster.instance.name);
    InstanceType ours = job.cluster.instance;
    if (!ours.collective_stack.empty()) {
      ours.ring = shipped.ring, ours.tree = shipped.tree, ours.all_to_all = shipped.all_to_all;
      ours.collective_stack = shipped.collective_stack;
    }
    ours.nccl.protocol = shipped.nccl.protocol;
    preset = YAML::Dump(instance_type_node(ours)) == YAML::Dump(instance_type_node(shipped));
  }
  if (preset) root["cluster"]["instance_type"] = job.cluster.instance.name;
  else root["cluster"]["instance_type"] = instance_type_node(job.cluster.instance);
  // A preset by name with another of its collective stacks (an inline instance type
  // already carries that stack's profiles).
  if (preset && !job.cluster.instance.collective_stack.empty())
    root["cluster"]["collective_stack"] = job.cluster.instance.collective_stack;
  if (job.cluster.instance.nccl.protocol != NcclProtocol::automatic)
    root["cluster"]["nccl_protocol"] = enum_name(job.cluster.instance.nccl.protocol);
  root["cluster"]["nodes"] = job.cluster.nodes;
  if (job.cluster.domain_nodes > 0) root["cluster"]["domain_nodes"] = job.cluster.domain_nodes;
  root["cluster"]["oversubscription"] = job.cluster.oversubscription;
  root["training"]["global_batch"] = job.training.global_batch;
  root["training"]["precision"] = enum_name(job.training.precision);
  root["training"]["optimizer"] = enum_name(job.training.optimizer);
  root["training"]["gradient_accumulation"] = job.training.gradient_accumulation;
  if (job.training.loss_precision != LossPrecision::fp32)
    root["training"]["loss_precision"] = enum_name(job.training.loss_precision);
  if (job.training.kernel_fusion != KernelFusion::fused)
    root["training"]["kernel_fusion"] = enum_name(job.training.kernel_fusion);
  if (job.training.optimizer_impl != OptimizerImpl::fused)
    root["training"]["optimizer_impl"] = enum_name(job.training.optimizer_impl);
  if (job.training.cuda_graphs) root["training"]["cuda_graphs"] = true;
  if (job.training.fp8_recipe != Fp8Recipe::delayed) root["training"]["fp8_recipe"] = enum_name(job.training.fp8_recipe);
  if (job.training.moment_precision != Precision::fp32)
    root["training"]["moment_precision"] = enum_name(job.training.moment_precision);
  if (job.training.attention_impl) root["training"]["attention_impl"] = enum_name(*job.training.attention_impl);
  root["parallel"] = parallel_node(job.parallel);
  YAML::Emitter out;
  out << root;
  return "# Written by partune search from " + origin_note + ".\n" + std::string(out.c_str()) + "\n";
}

void write_job_file(const std::string& path, const Job& job, const std::string& origin_note) {
  write_file_atomically(path, job_yaml(job, origin_note));
}

}  // namespace partune
