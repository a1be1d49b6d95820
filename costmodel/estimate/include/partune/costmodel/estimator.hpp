#pragma once
// The fast analytical estimator: step time of a job with its breakdown, throughput,
// FLOP rates and memory. Pure arithmetic (no allocation on the fitting path), so the
// autotuner can call it hundreds of thousands of times a second.
#include <string>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/job_costs.hpp"
#include "partune/costmodel/memory.hpp"

namespace partune {

// Where the time of one step goes, on the critical (slowest) pipeline stage. The
// "exposed" parts are what is left on the critical path after overlap with compute;
// step_time = compute + tensor_parallel_comm + context_parallel_comm + expert_parallel_comm
//           + pipeline_bubble + pipeline_drain_waits + pipeline_p2p + data_parallel_exposed
//           + sharded_exposed + offload_exposed + optimizer.
// The other fields are totals (busy time, hidden in part) or parts of a part (recompute).
struct StepBreakdown {
  double compute = 0;                 // forward + backward kernels, all micro-batches
  double recompute = 0;               // of which activation recompute
  double tensor_parallel_comm = 0;    // the tensor group's collectives inside layers (exposed)
  double context_parallel_comm = 0;   // context parallelism's K/V exchange (exposed)
  double expert_parallel_comm = 0;    // the experts' token all-to-alls (exposed)
  double pipeline_bubble = 0;         // fill and drain idle time of the schedule
  double pipeline_drain_waits = 0;    // the critical stage waiting on the later stages' last
                                      // backwards, stretched by their gradient buckets
  double pipeline_p2p = 0;            // exposed activation/gradient transfers
  double data_parallel_comm = 0;      // gradient all-reduce (or RS+AG) of one rank, total
  double data_parallel_exposed = 0;   // of it, on the critical stage; <= data_parallel_comm
  double sharded_comm = 0;            // sharded DP all-gathers + reduce-scatters, total
  double sharded_exposed = 0;         // what they leave exposed, with FSDP2's copies on the
                                      // compute stream (sharding.hpp's gather_copies)
  double offload_traffic = 0;         // activation offload + reload over PCIe, total
  double offload_exposed = 0;
  double optimizer = 0;
  // The collectives inside the layers, every group's: tensor + context + expert.
  double layer_comm() const { return tensor_parallel_comm + context_parallel_comm + expert_parallel_comm; }
};

// The figures of one training step, the same definitions and JSON keys whoever produces
// them: the estimator (its Estimate) and the simulator (SimResult::metrics, on the
// simulated step).
struct StepMetrics {
  double step_time = 0;          // s
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double model_flops = 0;        // per step, no recompute (the 72 formula)
  double hardware_flops = 0;     // per step, recompute counted
  double tflops_per_gpu = 0;     // model FLOPs / (step time * GPUs) / 1e12
  double hw_tflops_per_gpu = 0;  // hardware FLOPs / (step time * GPUs) / 1e12
  double mfu = 0;                // model FLOPs / (step time * GPUs * peak)
  StepBreakdown breakdown;
  MemoryBreakdown memory;        // the largest stage
  double memory_capacity = 0;    // HBM of one GPU
  bool fits = true;
  std::string not_fit_reason;    // empty when it fits
};
// What the estimator predicts.
using Estimate = StepMetrics;

// estimate's memory verdict alone, without the step time or the reason: what the search
// needs to drop a configuration that cannot fit before timing it.
struct MemoryFit {
  MemoryBreakdown memory;  // the largest stage, as Estimate::memory
  bool fits = true;        // as Estimate::fits
};

// Assumes check_job(job) passed. The job's costs are built once (job_costs.hpp) and every
// step reads them; a caller that holds them passes them, and one that has asked
// estimate_memory already passes its verdict too (the same figures).
Estimate estimate(const Job& job);
Estimate estimate(const JobCosts& costs);
Estimate estimate(const JobCosts& costs, const MemoryFit& memory);
MemoryFit estimate_memory(const Job& job);
MemoryFit estimate_memory(const JobCosts& costs);

// The headline figures of a step of `step_time` seconds (samples and tokens per second,
// model and hardware FLOPs and TFLOPs per GPU, MFU), the same definitions for the
// estimator and the simulator; the breakdown and memory are left empty.
StepMetrics headline_metrics(const Job& job, double step_time);
StepMetrics headline_metrics(const JobCosts& costs, double step_time);

}  // namespace partune
