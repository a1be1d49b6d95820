#pragma once
// A GPT-style decoder in the LibTorch C++ frontend: token embedding (+ learned position
// embedding; none with rotary positions, which the layers apply), `layers` pre-norm
// transformer layers of the (scaled) job's ModelSpec's block (transformer_layer.hpp: GPT's,
// LLaMA's or a mix), a final norm and an LM head (the token embedding's transpose when the model ties
// them, else its own ColumnParallelLinear without bias), cross-entropy loss averaged over
// the tokens. fp32 on CPU.
//
// One rank holds a shard of it (ModelShard): the layers of its pipeline stage, the
// embedding on the first model stage, the final LN and head on the stage that runs the
// head, each split over the tensor-parallel group in Megatron's manner:
//   - token embedding: vocabulary-parallel (rank i holds rows [i V/t, (i+1) V/t); tokens
//     outside are looked up as zeros; g sums the partial embeddings). The position
//     embedding is replicated and added after the sum.
//   - attention: query and key/value heads split over the group (QKV column-parallel,
//     proj row-parallel); MLP: fc1 column-parallel (with SwiGLU each rank holds its slice
//     of the gate and of the up matrix), fc2 row-parallel. Norms replicated.
//   - LM head: logits for the rank's vocabulary slice (tied: h E_i^T after f; untied: a
//     ColumnParallelLinear); the loss is vocabulary-parallel cross-entropy (max, sum of
//     exponentials and the target logit each all-reduced over the group), so the full
//     logits never exist on one rank.
// The region edges are the layer plan's conjugates (ModelShard::conjugates, conjugates.hpp).
// With sequence parallelism the embedding's g becomes sp_scatter (each rank keeps its
// sequence shard and adds its positions' embeddings), the layers pass shards
// [batch, seq/t, hidden] between them and over the pipeline, and the head's f becomes
// sp_gather before the logits. The replicated parameters used on a shard (the norms,
// the row-parallel biases, the position embedding, those the model has) then get only
// their shard's gradient: sequence_parallel_parameters() lists them for the sum over
// the group.
//
// With the head's stage holding no embedding (pipeline > 1, tied, head on the last
// stage), it keeps its own copy of the embedding slice (Megatron does the same; the
// executor all-reduces the two copies' gradients, CommGroup::embedding).
//
// Initialisation is a pure function of the seed (its own generator, not the global one),
// GPT-2 / Megatron style: weights ~ N(0, 0.02), the two residual output projections
// (attention proj, fc2) ~ N(0, 0.02 / sqrt(2 * layers)), biases 0, norm scales 1 and
// LayerNorm shifts 0. Every shard draws the whole model's values in the whole model's
// order and keeps its slice, so any sharding of the same seed holds exactly the
// unsharded model's numbers. A fused weight is drawn whole: QKV [h + 2 kv_heads d, h]
// (q; k; v), SwiGLU's fc1 [2 ffn, h] (gate; up).
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/conjugates.hpp"
#include "partune/backend/context_parallel.hpp"
#include "partune/backend/expert_parallel.hpp"
#include "partune/backend/parallel_linear.hpp"
#include "partune/backend/tensor_parallel.hpp"
#include "partune/backend/transformer_layer.hpp"
#include "partune/costmodel/model.hpp"

namespace partune::backend {

constexpr double kInitStd = 0.02;

struct ModelShard {
  TensorParallel tensor;    // null: tensor degree 1
  std::vector<int> layers;  // model layers held (global indices, ascending); empty = all
  bool embedding = true;    // holds the embeddings: runs embed()
  bool head = true;         // holds ln_f and the LM head: runs logits() / head_loss()
  LayerConjugates conjugates;  // the plan's region edges (default: Megatron's f / g)
  ExpertParallel expert;       // the expert group (null: degree 1); layers with experts only
  ContextParallel context;     // the context group (null: degree 1): each sequence split over it
};

class GPTModelImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when the tensor degree does not divide heads, kv_heads,
  // hidden, ffn_hidden and vocab (naming which), or a layer index is out of range.
  // `model`: the job's as it runs (costmodel's scaled_job.hpp); `flash_attention`: the job's
  // attention kernel (parallel.flash_attention).
  GPTModelImpl(const ModelSpec& model, std::uint64_t seed, ModelShard shard = {}, bool flash_attention = false);

  // tokens [batch, seq] (int64) -> [batch, seq, hidden] (the whole hidden vector; the
  // rank's sequence shard [batch, seq/t, hidden] with sequence parallelism).
  torch::Tensor embed(const torch::Tensor& tokens);
  // model layer i (0-based, global index; must be held)
  torch::Tensor layer(int i, const torch::Tensor& x);
  // final LN + LM head: [batch, seq, hidden] -> logits of the rank's vocabulary slice
  torch::Tensor logits(const torch::Tensor& x);
  // mean cross-entropy over all tokens against targets [batch, seq] (the same value on
  // every rank of the tensor group)
  torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& targets);
  // the whole model: embed, every layer, head_loss (only for a shard holding everything)
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets);

  bool holds_layer(int i) const;
  // The parameters of each part, for gradient buckets and sharding. The tied token
  // embedding, when the shard runs both embed() and the head, is listed once, in
  // embedding_parameters(); head_parameters() then holds ln_f (and lm_head when untied).
  std::vector<torch::Tensor> layer_parameters(int i);
  std::vector<torch::Tensor> embedding_parameters();
  std::vector<torch::Tensor> head_parameters();
  // Of layer_parameters(i), the experts' (a layer with experts: its local experts'
  // matrices and biases, not the router), reduced over the expert-data group.
  std::vector<torch::Tensor> layer_expert_parameters(int i);
  // Held parameters replicated over the tensor group whose gradient each rank computes
  // from its part of the work only: its sequence shard (sequence parallelism), its heads
  // (QK-norm's scales at tensor degree > 1); empty otherwise. Their gradients are summed
  // over the group before the optimizer uses them (Megatron's allreduce_layernorm_grads).
  std::vector<torch::Tensor> sequence_parallel_parameters();

  ModelSpec spec;  // the model as it runs
  bool flash_attention = false;
  ModelShard shard;
  torch::Tensor wte;  // [vocab / t, hidden]: when embedding, or head with tied embeddings
  torch::Tensor wpe;  // [seq_len, hidden]: when embedding, with learned positions
  torch::nn::ModuleDict layers{nullptr};  // key: the global layer index as a string
  Norm ln_f{nullptr};                      // when head
  ColumnParallelLinear lm_head{nullptr};   // when head and the embeddings are not tied
};
TORCH_MODULE(GPTModel);

// Mean cross-entropy over the tokens of `logits` [..., V/t] (this rank's vocabulary slice
// [rank V/t, (rank + 1) V/t) of the whole logits) against global targets [...]. Degree > 1:
// three all-reduces over the group (max, sum of exponentials, target logit), the same
// value on every rank, a local backward. Degree 1: LibTorch's cross_entropy.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           const TensorParallel& tp);

}  // namespace partune::backend
