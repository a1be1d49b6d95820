#pragma once
// Memory per GPU under every parallel knob. Activation sizes follow Korthikanti et al.
// 2022 ("Reducing Activation Recomputation in Large Transformer Models"), per layer and
// micro-batch of b sequences with tensor parallel degree t and no sequence parallelism:
//   s b h (10 + 24/t + 5 a s / (h t)) bytes   (16-bit activations)
// FlashAttention never stores the a s^2 score matrices, so the last term goes.
#include <algorithm>
#include <string>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/job_costs.hpp"
#include "partune/costmodel/activation_memory.hpp"
#include "partune/costmodel/parameter_count.hpp"

namespace partune {

struct MemoryBreakdown {
  double parameters = 0;       // resident parameter copies (training precision)
  double gradients = 0;
  double optimizer_states = 0; // fp32 master weights + moments
  double gathered_parameters = 0;  // sharded DP: full layers materialised for compute
  double activations = 0;      // stored for backward, all in-flight micro-batches
  double activation_working = 0;   // one layer's full activations during recompute/backward
  double logits = 0;           // LM-head output and loss buffers on the head's stage
  // Of `logits`, one micro-batch's: the head's backward frees them before the layers
  // beneath it recompute, so they and activation_working are never live together.
  double logits_one_microbatch = 0;
  double communication_buffers = 0;
  double reserved = 0;         // CUDA context, allocator slack
  double host_offload = 0;     // host bytes per GPU (not on it): offloaded activations, and with
                               // offload_optimizer / offload_parameters the states moved there
  int stage = 0;               // pipeline stage these numbers belong to

  // The head's logits and the recompute working set share the peak (the larger of the two).
  double transient() const {
    return logits - logits_one_microbatch + std::max(logits_one_microbatch, activation_working);
  }
  double total() const {
    return parameters + gradients + optimizer_states + gathered_parameters + activations + transient() +
           communication_buffers + reserved;
  }
};

// Per layer and per micro-batch: the activation bytes (activation_memory.hpp).

// Micro-batches whose activations a stage holds at once: in_flight_microbatches, the
// schedule's own rule (schedule.hpp).

// Memory of one pipeline stage's GPU, from the job's plans and parameter counts
// (job_costs.hpp); the Job forms build the plans themselves.
MemoryBreakdown stage_memory(const JobCosts& costs, int stage);
MemoryBreakdown stage_memory(const Job& job, int stage);
// The stage with the largest footprint (the one that decides whether the job fits).
MemoryBreakdown peak_memory(const JobCosts& costs);
MemoryBreakdown peak_memory(const Job& job);

}  // namespace partune
