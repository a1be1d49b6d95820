#pragma once
// Activation memory per layer and per micro-batch, from the layer plan: what each op
// keeps for backward (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
// Transformer Models": s b h (10 + 24/t + 5 a s / (h t)) bytes per layer with 16-bit
// activations and no sequence parallelism; FlashAttention never stores the a s^2 score
// matrices, so the last term goes), the LM head's logits, and the largest non-layer unit.
// The program builder (offload and reload copies) and memory's stage totals
// (memory.hpp) both read these.
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/parameter_count.hpp"

namespace partune {

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
// (For a mixture of experts with dense layers: the mean over the model's layers, what the
// partitioner and the estimator's offload rule take for a layer; *_by_kind below gives each
// kind's.)
double stored_layer_bytes(const Job& job, double sequences);

// Bytes a layer that is not checkpointed keeps for backward per micro-batch (Korthikanti,
// no 5as/ht term with FlashAttention): what stored_layer_bytes gives without checkpointing.
double full_layer_bytes(const Job& job, double sequences);

// Bytes a split backward's W step still needs of one layer after its B, per micro-batch
// (LayerPlan::weight_gradient_bytes at the training precision), and the two figures above,
// for each kind of layer, dense and with experts (both the dense layer's for a model
// without experts): what one given layer keeps, where the means above stand for any layer. The simulator's memory over the timeline and the
// programs' offload copies weigh a chunk's layers by their kinds (Job::chunk_mix).
struct LayerKindBytes {
  double dense = 0, moe = 0;
  double of(const LayerMix& mix) const { return dense * mix.dense + moe * mix.moe; }
};
// The figures below at the micro-batch, from the job's plans at plan_config(job) (a dense
// layer and one with experts, the dense one again for a model without experts), already
// built: stored_layer_bytes, and the *_by_kind's.
double stored_layer_bytes(const Job& job, const LayerPlan& dense, const LayerPlan& moe);
LayerKindBytes stored_layer_bytes_by_kind(const Job& job, const LayerPlan& dense, const LayerPlan& moe);
LayerKindBytes full_layer_bytes_by_kind(const Job& job, const LayerPlan& dense, const LayerPlan& moe);
LayerKindBytes weight_gradient_bytes_by_kind(const Job& job, const LayerPlan& dense, const LayerPlan& moe);
LayerKindBytes stored_layer_bytes_by_kind(const Job& job, double sequences);
LayerKindBytes full_layer_bytes_by_kind(const Job& job, double sequences);
LayerKindBytes weight_gradient_bytes_by_kind(const Job& job, double sequences);

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
// The same from a head plan already built (at plan_config(job)).
double logits_bytes(const LayerPlan& head);

}  // namespace partune
