#pragma once
// Hand-built hardware for closed-form simulator tests: every efficiency 1, no kernel
// launch overhead, GEMMs at full peak on every shape (tile 1, one SM, k_half 0), and links
// that are "free" (1e18 B/s, no latency) unless a test says otherwise.
#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/model.hpp"

namespace partune::testing {

inline constexpr double kFree = 1e18;  // bytes/s (or flop/s, or HBM bytes/s) that make a cost vanish

// A node of `gpus` GPUs with the given GPU peak; every link free unless a test says
// otherwise.
inline InstanceType ideal_instance(int gpus, double peak_flops) {
  InstanceType it;
  it.name = "ideal";
  it.gpus_per_node = gpus;
  GpuProfile& g = it.gpu;
  g.name = "ideal-gpu";
  g.peak_flops_fp32 = g.peak_flops_tf32 = g.peak_flops_fp16 = g.peak_flops_bf16 = peak_flops;
  g.hbm_bytes = 1e15;
  g.hbm_bw = kFree;
  g.hbm_efficiency = 1.0;
  g.kernel_overhead = 0.0;
  g.reserved_bytes = 0.0;
  g.gemm.max_efficiency = 1.0;
  g.gemm.tile = 1.0;  // no tile or wave quantization, no short-k penalty: every GEMM at peak
  g.gemm.sm_count = 1.0;
  g.gemm.k_half = 0.0;
  g.attention.score_bmm_efficiency = 1.0;
  it.intra_node = {kFree, 0.0, 1.0};
  it.nics_per_node = 1;
  it.nic = {kFree, 0.0, 1.0};
  it.pcie_bw = kFree;
  it.gpus_per_pcie_switch = 1;
  it.ring = {1.0, 1.0};
  it.tree = {1.0, 1.0};
  it.all_to_all = {1.0, 1.0};
  return it;
}

inline Job ideal_job(const ModelSpec& model, const InstanceType& inst, int nodes, int global_batch) {
  Job j;
  j.name = "ideal";
  j.model = model;
  j.cluster.instance = inst;
  j.cluster.nodes = nodes;
  j.training.global_batch = global_batch;
  j.training.precision = Precision::fp16;
  j.training.optimizer = Optimizer::adam;
  return j;
}

}  // namespace partune::testing
