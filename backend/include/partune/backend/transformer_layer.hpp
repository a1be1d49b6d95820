#pragma once
// One pre-LN GPT transformer layer, Megatron's split:
//   x = x + ParallelAttention(LN1(x))
//   x = x + ParallelMLP(LN2(x))
// ParallelAttention: QKV = ColumnParallelLinear(h, 3h) (heads split over the tensor
// group), causal softmax(Q K^T / sqrt(d)) V per head, output RowParallelLinear(h, h).
// ParallelMLP: ColumnParallelLinear(h, ffn) -> GeLU (exact, erf) -> RowParallelLinear(ffn, h).
// Over a tensor group of t ranks, rank i computes heads [i heads/t, (i+1) heads/t) and
// fc1 columns [i ffn/t, (i+1) ffn/t); the only communication is at the region edges, as
// the layer plan states them (LayerConjugates): f before QKV and fc1 (backward) and g
// after proj and fc2 (forward), or with sequence parallelism sp_gather / sp_scatter there,
// the layer's input, norms and residuals then holding a sequence shard [batch, seq/t,
// hidden]. The LayerNorms are replicated.
// No dropout (deterministic; recompute reproduces the forward exactly). fp32.
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/conjugates.hpp"
#include "partune/backend/parallel_linear.hpp"
#include "partune/backend/tensor_parallel.hpp"

namespace partune::backend {

// --- Selective activation recomputation (Korthikanti et al. 2022, section 4.3; Megatron's
// CheckpointFunction around core_attention): the attention core, softmax(Q K^T / sqrt(d))
// V under the causal mask, keeps only Q, K and V, and its s x s probabilities are computed
// again before backward: the ops the layer plan marks `recomputable`. Nothing else runs
// twice, so no tensor-parallel collective is repeated.
struct CheckpointedAttention {
  torch::Tensor q, k, v;  // [batch, heads, seq, head_dim], detached (the core's inputs)
  torch::Tensor probs;    // set by recompute(), used and dropped by the core's backward
};
// While a Scope is open on this thread, each attention core that runs with autograd is
// checkpointed and registered here. recompute() (the program's `recompute` instruction)
// computes the registered cores' probabilities again; a core's backward uses them, or
// computes them itself when recompute() did not run. The registered cores must outlive
// the backward of the graph they are part of.
class SelectiveRecompute {
 public:
  class Scope {
   public:
    explicit Scope(SelectiveRecompute& into);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    SelectiveRecompute* previous_;
  };
  void recompute();
  std::size_t size() const { return cores_.size(); }
  void clear() { cores_.clear(); }
  // The scope open on this thread (nullptr when none).
  static SelectiveRecompute* active();
  CheckpointedAttention& add();

 private:
  std::vector<std::unique_ptr<CheckpointedAttention>> cores_;  // stable addresses: autograd refers to them
};

// softmax(Q K^T / sqrt(d)) V with the causal mask, per head: q, k, v [batch, heads, seq,
// head_dim]. Checkpointed (above) inside a SelectiveRecompute scope.
torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

class ParallelAttentionImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when heads do not divide hidden or the group's degree
  // does not divide heads.
  // flash_attention: the core is kernels::flash_attention (no s x s scores kept), else
  // causal_attention above.
  ParallelAttentionImpl(std::int64_t hidden, std::int64_t heads, TensorParallel tp = nullptr,
                        const LayerConjugates& conjugates = {}, bool flash_attention = false);
  // x: [batch, seq, hidden] -> [batch, seq, hidden] (seq / t of both with sequence parallelism)
  torch::Tensor forward(const torch::Tensor& x);

  std::int64_t hidden, heads;  // of the whole layer
  std::int64_t local_heads;    // heads / t: the heads this rank computes
  bool flash_attention = false;
  // The local QKV output is [q | k | v] of the local heads: 3 * local_heads * head_dim.
  ColumnParallelLinear qkv{nullptr};
  RowParallelLinear proj{nullptr};
};
TORCH_MODULE(ParallelAttention);

class ParallelMLPImpl : public torch::nn::Module {
 public:
  ParallelMLPImpl(std::int64_t hidden, std::int64_t ffn_hidden, TensorParallel tp = nullptr,
                  const LayerConjugates& conjugates = {});
  torch::Tensor forward(const torch::Tensor& x);

  ColumnParallelLinear fc1{nullptr};
  RowParallelLinear fc2{nullptr};
};
TORCH_MODULE(ParallelMLP);

class TransformerLayerImpl : public torch::nn::Module {
 public:
  TransformerLayerImpl(std::int64_t hidden, std::int64_t heads, std::int64_t ffn_hidden, TensorParallel tp = nullptr,
                       const LayerConjugates& conjugates = {}, bool flash_attention = false);
  torch::Tensor forward(const torch::Tensor& x);

  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  ParallelAttention attention{nullptr};
  ParallelMLP mlp{nullptr};
};
TORCH_MODULE(TransformerLayer);

// The layer norm every module here uses (eps 1e-5, as GPT-2).
constexpr double kLayerNormEps = 1e-5;

}  // namespace partune::backend
