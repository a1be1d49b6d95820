#pragma once
// Memory per GPU under every parallel knob. Activation sizes follow Korthikanti et al.
// 2022 ("Reducing Activation Recomputation in Large Transformer Models"), per layer and
// micro-batch of b sequences with tensor parallel degree t and no sequence parallelism:
//   s b h (10 + 24/t + 5 a s / (h t)) bytes   (16-bit activations)
// FlashAttention never stores the a s^2 score matrices, so the last term goes.
#include <algorithm>
#include <string>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/program.hpp"

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

// Parameters of the largest non-layer unit on `stage` on one rank (the embedding on
// stage 0, the head on the head's stage: parameter_count.hpp's RankParameters): what
// sharded data parallelism gathers whole, and whose gradient one kernel writes at once.
double largest_extra_unit(const Job& job, const RankParameters& rank, int stage);

// Korthikanti per-layer activation bytes for b sequences (no checkpointing).
double layer_activation_bytes(const ModelSpec& m, double sequences, int tensor_degree,
                              bool flash_attention);

// Bytes one checkpointed layer keeps for backward per micro-batch under the job's
// checkpointing policy (what offloading moves to the host): everything without
// checkpointing, all but the attention core with selective, the layer's input with full.
// Layers left out by parallel.checkpointed_layers keep full_layer_bytes instead.
// (For a mixture of experts with dense layers: the mean over the model's layers; these
// per-layer figures then stand for every layer, as the offload copies use them.)
double stored_layer_bytes(const Job& job, double sequences);

// Bytes a layer that is not checkpointed keeps for backward per micro-batch (Korthikanti,
// no 5as/ht term with FlashAttention): what stored_layer_bytes gives without checkpointing.
double full_layer_bytes(const Job& job, double sequences);

// Bytes recomputing one checkpointed layer materialises beside what it kept, per
// micro-batch (the stage's activation_working): the layer plan's recomputed_bytes under
// the job's policy, i.e. the whole layer's activations under full, the attention scores
// under selective (none with FlashAttention).
double recomputed_layer_bytes(const Job& job, double sequences);

// What one micro-batch leaves stored on `stage` for backward: its checkpointed layers
// (Job::checkpointed_layers_on_stage) at stored_layer_bytes, the others at full_layer_bytes.
double stored_stage_bytes(const Job& job, double sequences, int stage);

// Parameters per rank and per stage, and bytes per parameter: parameter_count.hpp.

// LM-head output and loss buffers of one micro-batch on the head's stage: fp16 logits
// plus the fp32 copy the cross-entropy works on, vocabulary split over tensor parallel.
double logits_bytes_per_microbatch(const Job& job);

// Micro-batches whose activations a stage holds at once: in_flight_microbatches, the
// schedule's own rule (program.hpp).

// Memory of one pipeline stage's GPU (`rank`: rank_parameters(job), when already built).
MemoryBreakdown stage_memory(const Job& job, int stage);
MemoryBreakdown stage_memory(const Job& job, const RankParameters& rank, int stage);
// The stage with the largest footprint (the one that decides whether the job fits).
MemoryBreakdown peak_memory(const Job& job);
MemoryBreakdown peak_memory(const Job& job, const RankParameters& rank);

}  // namespace partune
