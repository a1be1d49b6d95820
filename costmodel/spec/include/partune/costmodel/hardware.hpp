#pragma once
// Hardware description: one GPU profile, one instance type (a node), one cluster.
// Every field is SI (bytes, seconds, FLOP/s, bytes/s); the YAML catalog in
// scenarios/clusters/ gives each number with its source.
#include <array>
#include <string>

namespace partune {

// fp8: Transformer Engine's recipe on H100/H200: the GEMMs run in FP8 (at the FP8 peak,
// each operand cast with its per-tensor scale first), everything else as bf16 mixed
// precision (activations, weights and gradients in 2 bytes, fp32 master weights and
// optimizer). mxfp8 and fp4 are Blackwell's block-scaled formats, the same recipe with
// the GEMMs at their own peaks: MXFP8 (e4m3, one e8m0 scale per 32 elements) and NVFP4
// (e2m1, one e4m3 scale per 16 elements).
enum class Precision { fp32, tf32, fp16, bf16, fp8, mxfp8, fp4 };
const char* to_string(Precision p);
// Bytes of one parameter/activation element stored in this precision (the 8- and 4-bit
// formats: 2, their tensors are kept in bf16).
double bytes_per_element(Precision p);
// 16-bit training with fp32 master weights: fp16, bf16 and the 8- and 4-bit GEMM formats.
bool mixed_precision(Precision p);
// The GEMMs run in an 8- or 4-bit format (fp8, mxfp8, fp4), their operands cast first.
bool low_precision_gemms(Precision p);
// The precision of the ops that are not GEMMs (attention core, element-wise): bf16 for
// the low-precision GEMM formats.
Precision non_gemm_precision(Precision p);

// How efficiently a GPU runs dense matrix products. The m x n output is cut into
// tile x tile blocks spread over sm_count multiprocessors in waves; a GEMM runs at
//   peak * max_efficiency * occupancy * fill * k / (k + k_half)
// where occupancy = tiles / (waves * sm_count) (wave quantization), fill = the useful
// part of the edge tiles (tile quantization) and k_half the reduction length at which
// the main loop's prologue/epilogue costs half; floored by the memory roofline. Fitted
// to the shape sweeps in reference/microbench.md §1.3–1.4 (mean error ~9% over 28 shapes).
struct GemmEfficiency {
  double max_efficiency = 0.86;  // fraction of dense peak with full waves and long k
  double tile = 128;             // output tile edge, elements
  double sm_count = 108;         // multiprocessors (cores on a CPU: use 1 and tile 1)
  double k_half = 512;           // elements
  double fp8_max_efficiency = 0;  // max_efficiency of FP8 GEMMs (of the FP8 peak); 0: max_efficiency;
                                  // MXFP8 GEMMs run at it too (the FP8 tensor rate)
  double fp4_max_efficiency = 0;  // of FP4 GEMMs (of the FP4 peak); 0: max_efficiency
};

// The fused (flash) attention kernels a stack may run (training.attention_impl): Tri Dao's
// FlashAttention v1, v2 and v3, cuDNN's fused attention (what Transformer Engine and
// LibTorch's scaled_dot_product_attention run on Hopper), and partune's own kernel
// (kernels/flash_attention.hpp).
enum class AttentionKernel { flash1, flash2, flash3, cudnn, partune };
inline constexpr int kAttentionKernels = 5;

// A flash kernel's forward + backward rate over causal attention, a fraction of the dense
// peak on the FLOPs it does: rising with the sequence (the causal diagonal's partly masked
// tiles and the waves of a short sequence) and with the head dim (the tile's work per byte):
//   max_efficiency * s / (s + seq_half) * [d / (d + head_dim_half)] / [128 / (128 + head_dim_half)]
// (max_efficiency: a long sequence at head dim 128). seq_half 0 and head_dim_half 0: flat.
struct FlashCurve {
  double max_efficiency = 0;  // 0: the profile has no curve for this kernel
  double seq_half = 0;        // tokens
  double head_dim_half = 0;   // elements
  double at(double seq, double head_dim) const;
};

// Attention kernels. FlashAttention is rated on the FLOPs it really does (causal
// attention skips the masked half); standard attention is modelled as batched GEMMs plus
// memory-bound passes over the s x s score matrix.
struct AttentionProfile {
  // The profile's own flash kernel (`kernel`), what a job runs unless its attention_impl
  // names another: flash_efficiency its max_efficiency, with flash_seq_half and
  // flash_head_dim_half its curve (FlashCurve; 0: flat).
  AttentionKernel kernel = AttentionKernel::flash2;
  double flash_efficiency = 0.22;          // of dense peak, fwd+bwd, on causal FLOPs
  double flash_seq_half = 0, flash_head_dim_half = 0;
  // Other kernels this GPU has a measured curve for (`kernels:`), by AttentionKernel.
  std::array<FlashCurve, kAttentionKernels> kernels{};
  // The curve of kernel k on this GPU (the profile's own kernel from the flash_* keys);
  // max_efficiency 0 when the profile has none.
  FlashCurve curve(AttentionKernel k) const;
  double score_bmm_efficiency = 0.33;      // of dense peak, QK^T and AV at head_dim 128
  double score_bytes_fwd = 12.0;           // HBM bytes moved per score element, forward
  double score_bytes_bwd = 24.0;           // and backward
  // The device's FlashAttention kernel takes fp32 (partune's CPU kernel does; the GPU
  // kernels take fp16/bf16 only).
  bool flash_fp32 = false;
};
// ", kernels flash2, flash3": the other kernels a profile has curves for ("" for none).
std::string measured_kernels(const AttentionProfile& a);

struct GpuProfile {
  std::string name;
  double peak_flops_fp32 = 0;   // FLOP/s, dense
  double peak_flops_tf32 = 0;
  double peak_flops_fp16 = 0;
  double peak_flops_bf16 = 0;
  double peak_flops_fp8 = 0;    // 0: no FP8 tensor cores (before Hopper)
  double peak_flops_mxfp8 = 0;  // 0: no block-scaled FP8 (before Blackwell)
  double peak_flops_fp4 = 0;    // 0: no FP4 tensor cores (before Blackwell)
  double hbm_bytes = 0;         // capacity
  double hbm_bw = 0;            // bytes/s, spec
  double hbm_efficiency = 0.8;  // achieved fraction of hbm_bw by real element-wise kernels
  double kernel_overhead = 4e-6;  // s per kernel launch (small-kernel floor)
  // The rates of the memory-bound kernel classes other than contiguous element-wise ones
  // (layer_plan.hpp's KernelClass), fractions of hbm_bw; 0: hbm_efficiency. strided:
  // LibTorch's non-vectorised element-wise kernel (a broadcast or strided operand); norm:
  // norms, softmax and reductions; copy: copies and format conversions.
  // transpose: a transposed view made contiguous.
  double strided_efficiency = 0, norm_efficiency = 0, copy_efficiency = 0, transpose_efficiency = 0;
  // The host's time to launch one kernel from an eager framework (PyTorch's operator
  // dispatch with autograd recording): an op whose kernels are shorter leaves the GPU
  // idle for the difference (op_cost.hpp). 0: not modelled; no gap under CUDA graphs.
  double dispatch = 0;  // s
  // The host's fixed work of running one transformer layer on one micro-batch beyond what
  // the plan prices (operator dispatch, autograd bookkeeping, allocations), forward and
  // backward: where the host runs the kernels itself and waits for them (the CPU backend),
  // it adds to the layer's time. Measured by `partune calibrate` on the backend's own layer
  // (op_cost.hpp's plan_time adds it); 0 where not measured (GPUs queue their kernels).
  double layer_overhead_fwd = 0, layer_overhead_bwd = 0;  // s
  double reserved_bytes = 0;    // CUDA context, communicator buffers, allocator slack
  GemmEfficiency gemm;
  AttentionProfile attention;

  double peak_flops(Precision p) const;
};

// A link level of the two-level topology (NVSwitch inside a node, NICs between nodes).
struct LinkLevel {
  double bw = 0;          // bytes/s per direction (per GPU for NVSwitch, per NIC for NICs)
  double latency = 0;     // s, one hop
  double efficiency = 1;  // achieved fraction of bw for large transfers
};

// How one collective algorithm behaves on this instance type, beyond the link model.
// Kept separate from the topology (ASTRA-sim's rule): the algorithm decides who talks
// to whom; these numbers say how well that implementation drives the links.
struct CollectiveProfile {
  double net_efficiency = 1.0;   // multiplies the NIC efficiency for this algorithm
  double compute_overlap = 1.0;  // fraction of its time that can hide under compute
  // Fixed cost of one collective call whatever its size, on top of the links' latency:
  // the library's own hand-off (Gloo on CPU queues each collective to a worker thread:
  // about a millisecond on the local VM). 0 for the GPU profiles, whose per-step link
  // latencies already cover it.
  double launch_latency = 0;  // seconds
  // Of the intra-node fabric's rate, what this implementation reaches (1 for the GPU
  // profiles, whose intra_node.efficiency is already NCCL's measured busbw; Gloo over
  // loopback: its all-reduce / all-gather rate against a plain send/recv).
  double intra_efficiency = 1.0;
  // The stack has no reduce-scatter and runs an all-reduce, keeping its own part (Gloo in
  // LibTorch 1.13: backend/runtime/src/executor_collectives.cpp, backend/parallel/src/tensor_parallel.cpp).
  bool reduce_scatter_as_all_reduce = false;
};

// NCCL's tuning model for this instance (nccl_tuner.hpp): the GPU generation whose
// constant tables apply, the channels a collective runs across nodes, NVLink SHARP, and the
// job's NCCL_PROTO. `arch: none` (the default, and CPU instances running Gloo): one
// protocol, a hop costing its link's latency alone.
enum class NcclArch { none, ampere, hopper, blackwell };
enum class NcclProtocol { automatic, ll, ll128, simple };
struct NcclProfile {
  NcclArch arch = NcclArch::none;
  // Channels (one thread block each) a collective runs inside a node and across nodes: the
  // per-channel bandwidth caps multiply them.
  int channels = 1;
  int net_channels = 1;
  // NVLink SHARP all-reduce's algorithm bandwidth (S / t) as a share of intra_node.bw, as
  // measured; 0: the fabric has no NVLS.
  double nvls_efficiency = 0;
  // The job's NCCL_PROTO (cluster.nccl_protocol): automatic lets the tuner pick per call.
  NcclProtocol protocol = NcclProtocol::automatic;
};

// What one node costs (the instance-type file's `price:`; 0 = not known), with where the
// figures come from.
struct InstancePrice {
  double on_demand_per_hour = 0;           // USD per node-hour
  double spot_per_hour = 0;                // USD per node-hour
  double spot_interruptions_per_month = -1;  // share of nodes interrupted a month; < 0: not known
  std::string source;
};

// What fails and how a run recovers (the instance-type file's `failures:`; all 0 = not
// modelled), and where its checkpoints go (`checkpoint_storage:`), with their sources.
struct FailureRates {
  double per_gpu_per_hour = 0;   // interruptions a GPU causes, per GPU-hour
  double per_node_per_hour = 0;  // interruptions a node causes besides its GPUs', per node-hour
  double restart_seconds = 0;    // from the failure to training again (before the restore)
  std::string source;
};
struct CheckpointStorage {
  double per_node_bw = 0;  // bytes/s of shared storage a node's ranks write (and read) at
  std::string source;
};

struct InstanceType {
  std::string name;
  InstancePrice price;
  FailureRates failures;
  CheckpointStorage checkpoint_storage;
  int gpus_per_node = 8;
  // GPUs that reach each other over NVLink (intra_node.domain_gpus): the node (0, the
  // default), or an NVLink domain of several consecutive nodes (GB200 NVL72: 72 GPUs on
  // 18 trays of 4). Collectives, placement spans and the simulator's routes treat the
  // domain as the NVLink level; NICs, PCIe and the host stay the node's.
  int nvlink_domain_gpus = 0;
  int fabric_gpus() const { return nvlink_domain_gpus > 0 ? nvlink_domain_gpus : gpus_per_node; }
  GpuProfile gpu;
  std::string intra_node_fabric = "nvswitch";
  LinkLevel intra_node;      // per GPU
  int nics_per_node = 1;
  LinkLevel nic;             // per NIC
  double pcie_bw = 0;        // bytes/s host<->device, per PCIe switch
  int gpus_per_pcie_switch = 1;
  int host_cores = 0;
  // Speed each core keeps while every core of the host computes, relative to one core
  // computing alone (shared caches and memory bandwidth, a hypervisor): 1 = no contention.
  // Meaningful where ranks compute on the host's cores (CPU profiles).
  double host_all_busy_speed = 1.0;
  double host_memory_bytes = 0;
  // Bytes/s the host's memory sustains with every core streaming (a STREAM triad): the
  // rate of an optimizer step offloaded to the host, shared by the node's ranks. 0: unknown.
  double host_memory_bw = 0;
  CollectiveProfile ring;        // NCCL-style rings (GPU kernels)
  CollectiveProfile tree;        // NCCL-style double binary tree
  CollectiveProfile all_to_all;  // SMDDP-style all-to-all (CPU-driven on EFA)
  NcclProfile nccl;              // the NCCL tuner's tables and choices (collectives.nccl)
  // The dated collective stack (NCCL and network plugin as measured at one time) whose
  // profiles replaced the instance file's `collectives` (cluster.collective_stack, one of
  // its `collective_stacks`); empty: the file's own, today's stack.
  std::string collective_stack;

  // Achieved bytes/s out of one node onto the network, all NICs together.
  double node_net_bw() const { return nics_per_node * nic.bw * nic.efficiency; }
  int gpus_per_nic() const;
  // More ranks on a node than the host has cores (a CPU "device" per rank, as on the
  // local-cpu instance with extra ranks): the node's ranks compute on its shared cores.
  bool ranks_share_host_cores() const { return host_cores > 0 && gpus_per_node > host_cores; }
  // The node's ranks slow each other's compute down: they share cores, or the cores
  // slow down when all are busy (host.all_busy_speed < 1).
  bool ranks_share_host_compute() const {
    return host_cores > 0 && (ranks_share_host_cores() || host_all_busy_speed < 1.0);
  }
};

struct Cluster {
  InstanceType instance;
  int nodes = 1;
  double oversubscription = 1.0;  // fabric over-subscription (1 = full bisection)
  // The job's nodes in each NVLink domain (cluster.domain_nodes: a scheduler's segment,
  // Slurm's --segment; an NVL72 rack run with fewer trays than it has): consecutive runs
  // of this many nodes share a domain. 0: whole domains (the instance type's domain_gpus).
  // When set, instance.nvlink_domain_gpus is this many nodes' GPUs.
  int domain_nodes = 0;

  int gpu_count() const { return nodes * instance.gpus_per_node; }
};

}  // namespace partune
