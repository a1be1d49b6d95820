#include "job_writer.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <stdexcept>

#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/units.hpp"

namespace partune::cli {

namespace {
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
  n["gpu"]["hbm_GiB"] = g.hbm_bytes / units::GiB;
  n["gpu"]["hbm_bw_GBps"] = g.hbm_bw / units::giga;
  n["gpu"]["hbm_efficiency"] = g.hbm_efficiency;
  n["gpu"]["kernel_overhead_us"] = g.kernel_overhead / units::us;
  n["gpu"]["reserved_GiB"] = g.reserved_bytes / units::GiB;
  n["gpu"]["gemm"]["max_efficiency"] = g.gemm.max_efficiency;
  n["gpu"]["gemm"]["tile"] = g.gemm.tile;
  n["gpu"]["gemm"]["sm_count"] = g.gemm.sm_count;
  n["gpu"]["gemm"]["k_half"] = g.gemm.k_half;
  n["gpu"]["attention"]["flash_efficiency"] = g.attention.flash_efficiency;
  n["gpu"]["attention"]["score_bmm_efficiency"] = g.attention.score_bmm_efficiency;
  n["gpu"]["attention"]["score_bytes_fwd"] = g.attention.score_bytes_fwd;
  n["gpu"]["attention"]["score_bytes_bwd"] = g.attention.score_bytes_bwd;
  n["intra_node"]["fabric"] = it.intra_node_fabric;
  n["intra_node"]["bw_GBps"] = it.intra_node.bw / units::giga;
  n["intra_node"]["latency_us"] = it.intra_node.latency / units::us;
  n["intra_node"]["efficiency"] = it.intra_node.efficiency;
  n["network"]["nics_per_node"] = it.nics_per_node;
  n["network"]["nic_bw_Gbps"] = it.nic.bw * 8 / units::giga;
  n["network"]["latency_us"] = it.nic.latency / units::us;
  n["network"]["efficiency"] = it.nic.efficiency;
  n["pcie"]["bw_GBps"] = it.pcie_bw / units::giga;
  n["pcie"]["gpus_per_switch"] = it.gpus_per_pcie_switch;
  n["host"]["cores"] = it.host_cores;
  if (it.host_all_busy_speed < 1.0) n["host"]["all_busy_speed"] = it.host_all_busy_speed;
  n["host"]["memory_GiB"] = it.host_memory_bytes / units::GiB;
  auto coll = [](const CollectiveProfile& c) {
    YAML::Node x;
    x["net_efficiency"] = c.net_efficiency;
    x["compute_overlap"] = c.compute_overlap;
    if (c.launch_latency > 0) x["launch_us"] = c.launch_latency / units::us;
    return x;
  };
  n["collectives"]["ring"] = coll(it.ring);
  n["collectives"]["tree"] = coll(it.tree);
  n["collectives"]["all_to_all"] = coll(it.all_to_all);
  return n;
}
}  // namespace

std::string job_yaml(const Job& job, const std::string& origin_note) {
  YAML::Node root;
  root["kind"] = "job";
  root["name"] = job.name;
  const ModelSpec& m = job.model;
  YAML::Node model;
  model["name"] = m.name;
  model["layers"] = m.layers;
  model["hidden"] = m.hidden;
  model["heads"] = m.heads;
  model["kv_heads"] = m.kv_heads;
  model["ffn_hidden"] = m.ffn_hidden;
  model["vocab"] = m.vocab;
  model["seq_len"] = m.seq_len;
  model["tied_embeddings"] = m.tied_embeddings;
  model["attention"] = to_string(m.attention);
  root["model"] = model;
  const auto presets = list_presets("clusters");
  const bool preset = std::find(presets.begin(), presets.end(), job.cluster.instance.name) != presets.end();
  if (preset) root["cluster"]["instance_type"] = job.cluster.instance.name;
  else root["cluster"]["instance_type"] = instance_type_node(job.cluster.instance);
  root["cluster"]["nodes"] = job.cluster.nodes;
  root["cluster"]["oversubscription"] = job.cluster.oversubscription;
  root["training"]["global_batch"] = job.training.global_batch;
  root["training"]["precision"] = to_string(job.training.precision);
  root["training"]["optimizer"] = to_string(job.training.optimizer);
  root["training"]["gradient_accumulation"] = job.training.gradient_accumulation;
  const ParallelConfig& pc = job.parallel;
  YAML::Node p;
  p["pipeline_parallel_degree"] = pc.pipeline_parallel_degree;
  p["tensor_parallel_degree"] = pc.tensor_parallel_degree;
  p["sharded_data_parallel_degree"] = pc.sharded_data_parallel_degree;
  p["microbatches"] = pc.microbatches;
  if (pc.active_microbatches > 0) p["active_microbatches"] = pc.active_microbatches;
  p["pipeline"] = to_string(pc.pipeline);
  p["virtual_stages"] = pc.virtual_stages;
  if (!pc.stage_layers.empty()) {
    YAML::Node layers(YAML::NodeType::Sequence);
    for (int l : pc.stage_layers) layers.push_back(l);
    layers.SetStyle(YAML::EmitterStyle::Flow);
    p["stage_layers"] = layers;
  }
  p["lm_head_stage"] = to_string(pc.lm_head_stage);
  if (pc.checkpointed_layers >= 0) p["checkpointed_layers"] = pc.checkpointed_layers;
  p["placement_strategy"] = pc.placement_strategy;
  p["activation_checkpointing"] = to_string(pc.activation_checkpointing);
  p["offload_activations"] = pc.offload_activations;
  p["activation_loading_horizon"] = pc.activation_loading_horizon;
  p["shard_optimizer_state"] = pc.shard_optimizer_state;
  p["flash_attention"] = pc.flash_attention;
  if (pc.sequence_parallel) p["sequence_parallel"] = true;
  p["sharded_collective"] = to_string(pc.sharded_collective);
  p["data_parallel_collective"] = to_string(pc.data_parallel_collective);
  root["parallel"] = p;
  YAML::Emitter out;
  out << root;
  return "# Written by partune search from " + origin_note + ".\n" + std::string(out.c_str()) + "\n";
}

void write_job_file(const std::string& path, const Job& job, const std::string& origin_note) {
  const std::string tmp = path + ".partial";
  {
    std::ofstream f(tmp);
    if (!f) throw std::runtime_error("cannot write " + tmp);
    f << job_yaml(job, origin_note);
    if (!f) throw std::runtime_error("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw std::runtime_error("cannot move the job file into place at " + path);
  }
}

}  // namespace partune::cli
