#pragma once
// Why a configuration does not fit in HBM, and what to change: the estimator's (and the
// simulator's) one-line not-fit reason. The breakdown is read as three groups:
//   activations   stored activations and the recompute working set (MemoryBreakdown's
//                 activations + transient() - logits);
//   model states  parameters (resident and gathered), gradients, optimizer states;
//   logits        the LM head's output and loss buffers.
// The largest group, and any other holding at least a quarter of the total, gets the
// knobs that shrink it and that the job has not already turned (fit_hint).
#include <string>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/memory.hpp"

namespace partune {

// "stage S needs X GiB of Y GiB HBM; largest parts: P1 a GiB, P2 b GiB; to fit, shrink ..."
std::string not_fit_reason(const Job& job, const MemoryBreakdown& m, double capacity);

// The "to fit, shrink the activations with ...; the model states with ..." clause alone.
// Activations: flash_attention (when standard attention's s x s scores are at least a
// tenth of a layer's activations and live on the stage), activation_checkpointing,
// checkpointed_layers, offload_activations, fewer sequences per micro-batch,
// sequence_parallel. Model states: shard_optimizer_state, sharded_data_parallel_degree,
// expert_parallel_degree, tensor/pipeline degree, offload_optimizer. Logits: fewer
// sequences per micro-batch, loss_precision: training, 1F1B instead of GPipe.
std::string fit_hint(const Job& job, const MemoryBreakdown& m);

// The share of one layer's full activations (no checkpointing, one micro-batch) that is
// standard attention's s x s scores: what flash_attention: true removes. 0 with it on.
double attention_score_share(const Job& job);

}  // namespace partune
