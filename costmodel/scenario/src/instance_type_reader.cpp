// The instance-type and cluster sections of a scenario: the GPU, its links, the
// collective profiles (today's stack and the dated collective_stacks a cluster may pick).
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <string>
#include <vector>

#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/units.hpp"
#include "scenario_internal.hpp"
#include "yaml_reader.hpp"

namespace partune::detail {

namespace {

// `ctas`: the thread blocks the collective's kernel holds while it runs (NCCL: one a
// channel), each on an SM of its own; the kernels beside it run on the other SMs, so they
// lose ctas / sm_count of each second they overlap it: compute_overlap = 1 - ctas / sm_count
// (many-wave GEMMs; a one-wave GEMM can lose up to a whole second wave). Stated instead of
// compute_overlap, never with it.
CollectiveProfile parse_collective_profile(const Reader& r, const CollectiveProfile& fallback, double sm_count) {
  r.allow_only({"net_efficiency", "intra_efficiency", "reduce_scatter_as_all_reduce", "compute_overlap", "ctas",
                "launch_us", "source"});
  CollectiveProfile c = fallback;
  c.launch_latency = r.get_non_negative("launch_us", c.launch_latency / units::us) * units::us;
  c.net_efficiency = r.get_fraction("net_efficiency", c.net_efficiency);
  c.intra_efficiency = r.get_fraction("intra_efficiency", c.intra_efficiency);
  c.reduce_scatter_as_all_reduce = r.get_bool("reduce_scatter_as_all_reduce", c.reduce_scatter_as_all_reduce);
  if (r.has("ctas")) {
    if (r.has("compute_overlap")) r.fail("ctas", "give ctas or compute_overlap, not both (ctas sets compute_overlap)");
    if (sm_count <= 0) r.fail("ctas", "needs gpu.gemm.sm_count (the SMs the blocks are a share of)");
    const double ctas = r.get_in_range("ctas", 0, sm_count);
    c.compute_overlap = 1.0 - ctas / sm_count;
  } else {
    c.compute_overlap = r.get_in_range("compute_overlap", 0, 1, c.compute_overlap);
  }
  return c;
}

// instance_type.gpu: peaks, memory, kernel overhead, and the GEMM and attention efficiencies.
// gpu.attention's flash kernels: the profile's own (`kernel`, its flash_* curve) and the
// other kernels' measured curves (`kernels: {flash2: {max_efficiency, seq_half,
// head_dim_half}}`), hardware.hpp's FlashCurve.
AttentionKernel attention_kernel(const Reader& r, const std::string& key, const std::string& name) {
  if (const auto k = enum_value<AttentionKernel>(name)) return *k;
  r.fail(key, "'" + name + "' is not one of: " + enum_name_list<AttentionKernel>());
}

void read_flash_kernels(const Reader& at, AttentionProfile& a) {
  if (at.has("kernel")) a.kernel = attention_kernel(at, "kernel", at.get_string("kernel"));
  a.flash_efficiency = at.get_fraction("flash_efficiency", a.flash_efficiency);
  a.flash_seq_half = at.get_non_negative("flash_seq_half", a.flash_seq_half);
  a.flash_head_dim_half = at.get_non_negative("flash_head_dim_half", a.flash_head_dim_half);
  if (!at.has("kernels")) return;
  const Reader ks = at.child("kernels");
  ks.require_map();
  for (const auto& entry : ks.node()) {
    const std::string name = entry.first.as<std::string>();
    const AttentionKernel k = attention_kernel(ks, name, name);
    if (k == a.kernel) ks.fail(name, "is the profile's own kernel (gpu.attention.kernel): its curve is flash_*");
    const Reader c = ks.child(name);
    c.allow_only({"max_efficiency", "seq_half", "head_dim_half", "source"});
    a.kernels[static_cast<std::size_t>(k)] = {c.get_fraction("max_efficiency", 0), c.get_non_negative("seq_half", 0),
                                              c.get_non_negative("head_dim_half", 0)};
    if (!c.has("max_efficiency")) c.fail("max_efficiency", "is required");
  }
}

void read_gpu(const Reader& r, InstanceType& it) {
  const Reader g = r.child("gpu");
  g.allow_only({"name", "peak_tflops", "hbm_GiB", "hbm_bw_GBps", "hbm_efficiency", "kernel_overhead_us",
                "strided_efficiency", "norm_efficiency", "copy_efficiency", "transpose_efficiency", "dispatch_us", "layer_overhead_us",
                "reserved_GiB", "gemm", "attention"});
  it.gpu.name = g.get_string("name");
  const Reader peak = g.child("peak_tflops");
  peak.allow_only({"fp32", "tf32", "fp16", "bf16", "fp8", "mxfp8", "fp4"});
  it.gpu.peak_flops_fp32 = peak.get_positive("fp32") * units::tera;
  it.gpu.peak_flops_tf32 = peak.get_positive("tf32", peak.get_positive("fp32")) * units::tera;
  it.gpu.peak_flops_fp16 = peak.get_positive("fp16") * units::tera;
  it.gpu.peak_flops_bf16 = peak.get_non_negative("bf16", 0) * units::tera;  // 0: no bf16
  it.gpu.peak_flops_fp8 = peak.get_non_negative("fp8", 0) * units::tera;    // 0: no fp8
  it.gpu.peak_flops_mxfp8 = peak.get_non_negative("mxfp8", 0) * units::tera;  // 0: no mxfp8
  it.gpu.peak_flops_fp4 = peak.get_non_negative("fp4", 0) * units::tera;      // 0: no fp4
  it.gpu.hbm_bytes = g.get_positive("hbm_GiB") * units::GiB;
  it.gpu.hbm_bw = g.get_positive("hbm_bw_GBps") * units::giga;
  it.gpu.hbm_efficiency = g.get_fraction("hbm_efficiency", it.gpu.hbm_efficiency);
  it.gpu.kernel_overhead = g.get_non_negative("kernel_overhead_us", it.gpu.kernel_overhead / units::us) * units::us;
  it.gpu.strided_efficiency = g.get_fraction("strided_efficiency", it.gpu.strided_efficiency);
  it.gpu.norm_efficiency = g.get_fraction("norm_efficiency", it.gpu.norm_efficiency);
  it.gpu.copy_efficiency = g.get_fraction("copy_efficiency", it.gpu.copy_efficiency);
  it.gpu.transpose_efficiency = g.get_fraction("transpose_efficiency", it.gpu.transpose_efficiency);
  it.gpu.dispatch = g.get_non_negative("dispatch_us", it.gpu.dispatch / units::us) * units::us;
  it.gpu.reserved_bytes = g.get_non_negative("reserved_GiB", 0) * units::GiB;
  if (g.has("layer_overhead_us")) {
    const Reader lo = g.child("layer_overhead_us");
    lo.allow_only({"forward", "backward"});
    it.gpu.layer_overhead_fwd = lo.get_non_negative("forward", 0) * units::us;
    it.gpu.layer_overhead_bwd = lo.get_non_negative("backward", 0) * units::us;
  }
  if (g.has("gemm")) {
    const Reader ge = g.child("gemm");
    ge.allow_only({"max_efficiency", "tile", "sm_count", "k_half", "fp8_max_efficiency", "fp4_max_efficiency", "source"});
    it.gpu.gemm.max_efficiency = ge.get_fraction("max_efficiency", it.gpu.gemm.max_efficiency);
    it.gpu.gemm.tile = ge.get_positive("tile", it.gpu.gemm.tile);
    it.gpu.gemm.sm_count = ge.get_positive("sm_count", it.gpu.gemm.sm_count);
    it.gpu.gemm.k_half = ge.get_non_negative("k_half", it.gpu.gemm.k_half);
    if (ge.has("fp8_max_efficiency")) it.gpu.gemm.fp8_max_efficiency = ge.get_fraction("fp8_max_efficiency", 1.0);
    if (ge.has("fp4_max_efficiency")) it.gpu.gemm.fp4_max_efficiency = ge.get_fraction("fp4_max_efficiency", 1.0);
  }
  if (g.has("attention")) {
    const Reader at = g.child("attention");
    at.allow_only({"kernel", "flash_efficiency", "flash_seq_half", "flash_head_dim_half", "kernels", "flash_fp32",
                   "score_bmm_efficiency", "score_bytes_fwd", "score_bytes_bwd", "source"});
    auto& a = it.gpu.attention;
    read_flash_kernels(at, a);
    a.flash_fp32 = at.get_bool("flash_fp32", a.flash_fp32);
    // The head-dim curve's value at head_dim 128 (op_cost.cpp): it implies d/(d+64)*1.5
    // of it at head_dim d, capped by gemm.max_efficiency; 2 implies 1 at head_dim 32.
    a.score_bmm_efficiency = at.has("score_bmm_efficiency") ? at.get_in_range("score_bmm_efficiency", 1e-4, 2.0)
                                                            : a.score_bmm_efficiency;
    a.score_bytes_fwd = at.get_positive("score_bytes_fwd", a.score_bytes_fwd);
    a.score_bytes_bwd = at.get_positive("score_bytes_bwd", a.score_bytes_bwd);
  }
}

// instance_type.intra_node, .network and .pcie: the links a node's GPUs talk over.
void read_links(const Reader& r, InstanceType& it) {
  const Reader in = r.child("intra_node");
  in.allow_only({"fabric", "bw_GBps", "latency_us", "efficiency", "domain_gpus"});
  it.intra_node_fabric = in.get_string("fabric", "nvswitch");
  if (in.has("domain_gpus")) {
    it.nvlink_domain_gpus = in.get_int("domain_gpus", it.gpus_per_node, limits::kMaxRanks);
    if (it.nvlink_domain_gpus % it.gpus_per_node != 0)
      in.fail("domain_gpus", "an NVLink domain is whole nodes: " + std::to_string(it.nvlink_domain_gpus) +
                                 " is not a multiple of gpus_per_node " + std::to_string(it.gpus_per_node));
  }
  it.intra_node.bw = in.get_positive("bw_GBps") * units::giga;
  it.intra_node.latency = in.get_positive("latency_us") * units::us;
  it.intra_node.efficiency = in.get_fraction("efficiency", 1.0);

  const Reader net = r.child("network");
  net.allow_only({"nics_per_node", "nic_bw_Gbps", "latency_us", "efficiency"});
  it.nics_per_node = net.get_int("nics_per_node", 1, limits::kMaxGpusPerNode);
  it.nic.bw = units::gbit_to_bytes(net.get_positive("nic_bw_Gbps"));
  it.nic.latency = net.get_positive("latency_us") * units::us;
  it.nic.efficiency = net.get_fraction("efficiency", 1.0);

  const Reader pcie = r.child("pcie");
  pcie.allow_only({"bw_GBps", "gpus_per_switch"});
  it.pcie_bw = pcie.get_positive("bw_GBps") * units::giga;
  it.gpus_per_pcie_switch = pcie.get_int("gpus_per_switch", 1, limits::kMaxGpusPerNode, 1);
}

// instance_type.collectives.nccl: NCCL's tuning tables for this GPU generation, its
// channels and NVLink SHARP (hardware.hpp's NcclProfile).
NcclProfile parse_nccl_profile(const Reader& r, const NcclProfile& fallback) {
  r.allow_only({"arch", "channels", "net_channels", "nvls_efficiency"});
  NcclProfile n = fallback;
  if (r.has("arch")) {
    const std::string name = r.get_string("arch");
    const auto arch = enum_value<NcclArch>(name);
    if (!arch) r.fail("arch", "'" + name + "' is not one of: " + enum_name_list<NcclArch>());
    n.arch = *arch;
  }
  n.channels = r.get_int("channels", 1, 64, n.channels > 0 ? n.channels : 1);
  n.net_channels = r.get_int("net_channels", 1, 64, n.net_channels > 0 ? n.net_channels : n.channels);
  n.nvls_efficiency = r.get_in_range("nvls_efficiency", 0, 1, n.nvls_efficiency);
  return n;
}

// instance_type.collectives (or a collective stack): each algorithm's profile over the
// one before it. A stack may carry its `source`.
void read_collectives(const Reader& c, InstanceType& it, bool stack = false) {
  if (stack) c.allow_only({"ring", "tree", "all_to_all", "nccl", "source"});
  else c.allow_only({"ring", "tree", "all_to_all", "nccl"});
  if (c.has("nccl")) it.nccl = parse_nccl_profile(c.child("nccl"), it.nccl);
  const double sms = it.gpu.gemm.sm_count;
  if (c.has("ring")) it.ring = parse_collective_profile(c.child("ring"), it.ring, sms);
  if (c.has("tree")) it.tree = parse_collective_profile(c.child("tree"), it.tree, sms);
  if (c.has("all_to_all")) it.all_to_all = parse_collective_profile(c.child("all_to_all"), it.all_to_all, sms);
}

// instance_type.host and .collectives, both optional.
void read_host_and_collectives(const Reader& r, InstanceType& it) {
  if (r.has("host")) {
    const Reader h = r.child("host");
    h.allow_only({"cores", "memory_GiB", "all_busy_speed", "memory_bw_GBps"});
    it.host_cores = h.get_int("cores", 0, limits::kMaxHostCores, 0);
    it.host_all_busy_speed = h.get_fraction("all_busy_speed", 1.0);
    if (it.host_all_busy_speed < 1.0 && it.host_cores == 0)
      h.fail("all_busy_speed", "needs host.cores (the cores whose speed it describes)");
    it.host_memory_bytes = h.get_non_negative("memory_GiB", 0) * units::GiB;
    if (h.has("memory_bw_GBps")) it.host_memory_bw = h.get_in_range("memory_bw_GBps", 0.01, 1e6) * units::giga;
  }
  if (r.has("collectives")) read_collectives(r.child("collectives"), it);
}

// instance_type.collective_stacks: the names of the other collective stacks measured on
// the same hardware (older NCCL and network-plugin releases).
std::vector<std::string> collective_stack_names(const YAML::Node& instance) {
  std::vector<std::string> names;
  if (!instance.IsMap()) return names;
  for (const auto& entry : instance)
    if (entry.first.as<std::string>() == "collective_stacks" && entry.second.IsMap())
      for (const auto& kv : entry.second) names.push_back(kv.first.as<std::string>());
  return names;
}

}  // namespace

InstanceType parse_instance_type(const Reader& r, const std::string& collective_stack) {
  r.allow_only({"kind", "name", "description", "source", "gpus_per_node", "gpu", "intra_node",
                "network", "pcie", "host", "collectives", "collective_stacks", "calibration", "price", "failures",
                "checkpoint_storage"});
  if (r.has("kind") && r.get_string("kind") != "instance_type") r.fail("kind", "expected 'instance_type'");
  // `partune calibrate` keeps its provenance and raw measurements here; nothing reads
  // them, but they must stay a mapping so that a stray scalar is still caught.
  if (r.has("calibration") && !r.node()["calibration"].IsMap())
    r.fail("calibration", "expected a mapping (written by partune calibrate)");
  InstanceType it;
  it.name = r.get_string("name");
  it.gpus_per_node = r.get_int("gpus_per_node", 1, limits::kMaxGpusPerNode);

  read_gpu(r, it);
  read_links(r, it);
  read_host_and_collectives(r, it);
  if (r.has("collective_stacks") && !r.node()["collective_stacks"].IsMap())
    r.fail("collective_stacks", "expected a mapping of stack names to collectives");
  if (!collective_stack.empty()) {
    // Laid over `collectives`: only what that stack measured differently.
    read_collectives(r.child("collective_stacks").child(collective_stack), it, true);
    it.collective_stack = collective_stack;
  }
  if (r.has("failures")) {
    const Reader f = r.child("failures");
    f.allow_only({"per_gpu_per_hour", "per_node_per_hour", "restart_minutes", "source"});
    it.failures.per_gpu_per_hour = f.get_in_range("per_gpu_per_hour", 0.0, 1.0, 0.0);
    it.failures.per_node_per_hour = f.get_in_range("per_node_per_hour", 0.0, 1.0, 0.0);
    it.failures.restart_seconds = f.get_non_negative("restart_minutes", 0.0) * 60.0;
    it.failures.source = f.get_string("source", "");
  }
  if (r.has("checkpoint_storage")) {
    const Reader s = r.child("checkpoint_storage");
    s.allow_only({"per_node_GBps", "source"});
    it.checkpoint_storage.per_node_bw = s.get_positive("per_node_GBps") * units::giga;
    it.checkpoint_storage.source = s.get_string("source", "");
  }
  if (r.has("price")) {
    const Reader p = r.child("price");
    p.allow_only({"on_demand_usd_per_hour", "spot_usd_per_hour", "spot_interruptions_per_month", "source"});
    it.price.on_demand_per_hour = p.get_non_negative("on_demand_usd_per_hour", 0.0);
    it.price.spot_per_hour = p.get_non_negative("spot_usd_per_hour", 0.0);
    it.price.spot_interruptions_per_month = p.get_in_range("spot_interruptions_per_month", 0.0, 1.0, -1.0);
    it.price.source = p.get_string("source", "");
  }
  return it;
}

Cluster parse_cluster(const Reader& r) {
  r.allow_only({"kind", "name", "description", "instance_type", "nodes", "oversubscription", "collective_stack",
                "nccl_protocol", "domain_nodes"});
  if (!r.node().IsMap()) r.fail("", "expected a mapping with instance_type and nodes");
  if (r.has("kind") && r.get_string("kind") != "cluster") r.fail("kind", "expected 'cluster'");
  Cluster c;
  if (!r.has("instance_type")) r.fail("instance_type", "missing");
  const Resolved it = resolve_reference(r.node()["instance_type"], r.file(), r.key_path("instance_type"),
                                        "clusters");
  const std::string stack = r.get_string("collective_stack", "");
  if (!stack.empty()) {
    const std::vector<std::string> known = collective_stack_names(it.node);
    if (std::find(known.begin(), known.end(), stack) == known.end())
      r.fail("collective_stack",
             fmt::format("'{}' is not one of the instance type's collective_stacks ({})", stack,
                         known.empty() ? std::string("it has none") : fmt::format("{}", fmt::join(known, ", "))));
  }
  c.instance = parse_instance_type(Reader(it.node, it.file, it.key), stack);
  // The job's NCCL_PROTO: every NCCL collective runs that protocol (where NCCL can).
  if (r.has("nccl_protocol")) {
    const std::string name = r.get_string("nccl_protocol");
    const auto proto = enum_value<NcclProtocol>(name);
    if (!proto) r.fail("nccl_protocol", "'" + name + "' is not one of: " + enum_name_list<NcclProtocol>());
    if (c.instance.nccl.arch == NcclArch::none)
      r.fail("nccl_protocol", "the instance type has no NCCL tables (collectives.nccl.arch)");
    c.instance.nccl.protocol = *proto;
  }
  c.nodes = r.get_int("nodes", 1, limits::kMaxNodes, 1);
  if (r.has("domain_nodes")) {
    const int per_domain = c.instance.fabric_gpus() / c.instance.gpus_per_node;
    if (per_domain <= 1) r.fail("domain_nodes", "the instance type's NVLink domain is one node (intra_node.domain_gpus)");
    c.domain_nodes = r.get_int("domain_nodes", 1, per_domain);
    c.instance.nvlink_domain_gpus = c.domain_nodes * c.instance.gpus_per_node;
  }
  // 1 = full bisection.
  c.oversubscription = r.get_in_range("oversubscription", 1.0, limits::kMaxOversubscription, 1.0);
  return c;
}

}  // namespace partune::detail
