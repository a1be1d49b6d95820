#pragma once
// One pre-norm transformer layer, Megatron's split:
//   x = x + ParallelAttention(Norm1(x))
//   x = x + ParallelMLP(Norm2(x))
// The block is the (scaled) job's ModelSpec's (costmodel's scaled_job.hpp), as the layer plan states it
// (costmodel/layer_plan.cpp):
//   - GPT's: LayerNorm, GeLU MLP, multi-head attention, biases on every linear layer;
//   - LLaMA's: RMSNorm, SwiGLU MLP, rotary positions on the queries and keys, grouped-query
//     (or multi-query) attention, no biases;
//   or any mix of the two (each variant is independent of the others).
// ParallelAttention: QKV = ColumnParallelLinear(h, h + 2 kv_heads d): the queries of every
// head, then the keys and the values of every key/value head; causal softmax(Q K^T /
// sqrt(d)) V per query head, query head j reading key/value head j / (heads / kv_heads);
// output RowParallelLinear(h, h).
// ParallelMLP: GeLU: ColumnParallelLinear(h, ffn) -> GeLU (exact, erf) ->
// RowParallelLinear(ffn, h). SwiGLU: ColumnParallelLinear(h, 2 ffn), the gate and up
// matrices side by side, -> silu(gate) * up -> RowParallelLinear(ffn, h).
// Over a tensor group of t ranks, rank i computes query heads [i heads/t, (i+1) heads/t)
// with key/value heads [i kv_heads/t, (i+1) kv_heads/t) (Megatron: the key/value heads
// are split, never replicated, so t must divide kv_heads), and the ffn columns
// [i ffn/t, (i+1) ffn/t) (of the gate and of the up matrix with SwiGLU: its fc1 output on
// rank i is [gate_i | up_i]); the only communication is at the region edges, as the
// layer plan states them (LayerConjugates): f before QKV and fc1 (backward) and g after
// proj and fc2 (forward), or with sequence parallelism sp_gather / sp_scatter there, the
// layer's input, norms and residuals then holding a sequence shard [batch, seq/t, hidden].
// The norms are replicated.
// No dropout (deterministic; recompute reproduces the forward exactly). fp32.
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/conjugates.hpp"
#include "partune/backend/context_parallel.hpp"
#include "partune/backend/expert_parallel.hpp"
#include "partune/backend/parallel_linear.hpp"
#include "partune/costmodel/model.hpp"
#include "partune/backend/tensor_parallel.hpp"

namespace partune::backend {

// --- Norms, over the last dimension, with eps kNormEps (GPT-2's layer norm, LLaMA-2's
// rms_norm_eps):
//   layernorm  y = (x - mean(x)) / sqrt(var(x) + eps) * w + b
//   rmsnorm    y = x / sqrt(mean(x^2) + eps) * w          (scale only, no mean)
constexpr double kNormEps = 1e-5;

// RMSNorm over the last dimension; its backward keeps only x (and the b x s inverse roots).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps = kNormEps);

class NormImpl : public torch::nn::Module {
 public:
  NormImpl(std::int64_t hidden, NormKind kind);
  torch::Tensor forward(const torch::Tensor& x);

  NormKind kind;
  torch::Tensor weight;  // the scale w [hidden]
  torch::Tensor bias;    // the shift b [hidden]: layernorm only
};
TORCH_MODULE(Norm);

// --- Rotary positions (Su et al. 2021) in LLaMA's Hugging Face convention, rotate_half:
// a head vector x of d dimensions at position p becomes
//   x cos(p w) + rotate_half(x) sin(p w),   rotate_half([x1, x2]) = [-x2, x1]
// with x1, x2 its halves and w = [w_0 .. w_{d/2-1}, w_0 .. w_{d/2-1}], w_i = theta^(-2i/d),
// theta 10000: dimension i is paired with i + d/2. Applied to the queries and the keys of
// every head at the positions of the whole sequence (with sequence parallelism too: QKV's
// sp_gather gives it the whole sequence), no parameters; q . k then depends on the two
// positions' difference only.
constexpr double kRopeTheta = 10000.0;

// cos(p w) and sin(p w) for positions p = 0 .. positions - 1: each [positions, head_dim].
// Throws std::invalid_argument for an odd head_dim.
struct RotaryTables {
  torch::Tensor cos, sin;
};
RotaryTables rotary_tables(std::int64_t positions, std::int64_t head_dim, double theta = kRopeTheta);
// x [..., seq, head_dim] rotated by the rows of cos / sin [seq, head_dim] (x's positions).
torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

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

// The same with a sliding window and attention sinks (gpt-oss), through LibTorch's
// autograd (not checkpointed): query i attends to keys j with i - window < j <= i
// (window 0: every j <= i), and with `sinks` [heads] defined each head's softmax has one
// more logit in its denominator, p_ij = exp(s_ij) / (exp(sink) + sum_j' exp(s_ij')).
torch::Tensor windowed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 std::int64_t window, const torch::Tensor& sinks);

class ParallelAttentionImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when heads do not divide hidden, kv_heads do not divide
  // heads, the group's degree does not divide heads or kv_heads, or rotary positions meet
  // an odd head dim. `flash_attention` (the job's): the core is kernels::flash_attention (no
  // s x s scores kept), else causal_attention above.
  // With a context group (`cp`), the layer holds the rank's s / cp tokens of each
  // sequence at their global positions, and the core is context_attention
  // (context_parallel.hpp); FlashAttention is refused with it. `window` > 0: the layer's
  // queries look back over that many positions (themselves included); with the model's
  // attention_sinks a learned logit per head joins each softmax's denominator
  // (windowed_attention). Neither runs with FlashAttention or a context group (refused).
  ParallelAttentionImpl(const ModelSpec& model, TensorParallel tp = nullptr, const LayerConjugates& conjugates = {},
                        ContextParallel cp = nullptr, std::int64_t window = 0, bool flash_attention = false);
  // x: [batch, seq, hidden] -> [batch, seq, hidden] (seq / t of both with sequence parallelism)
  torch::Tensor forward(const torch::Tensor& x);

  std::int64_t hidden, heads, kv_heads, head_dim;  // of the whole layer
  std::int64_t local_heads, local_kv_heads;        // heads / t, kv_heads / t: this rank's
  bool flash_attention = false;
  RotaryTables rotary;  // [seq_len, head_dim] with rotary positions, else undefined
  // The local QKV output is [q | k | v]: local_heads d query columns, then local_kv_heads d
  // key and local_kv_heads d value columns.
  ColumnParallelLinear qkv{nullptr};
  RowParallelLinear proj{nullptr};
  // QK-norm (config.qk_norm): RMSNorm over head_dim of every query and key head before
  // the rotary positions; whole on every tensor rank (their gradients summed over the
  // group: GPTModel::sequence_parallel_parameters).
  Norm q_norm{nullptr}, k_norm{nullptr};
  std::int64_t window = 0;  // 0: the whole causal past
  torch::Tensor sinks;      // [local_heads]: the rank's heads' sink logits (attention_sinks)

 private:
  ContextParallel cp_;
  std::int64_t seq_len_ = 0;  // the whole sequence's (the rotary tables' length)
};
TORCH_MODULE(ParallelAttention);

// SwiGLU over y = [gate | up] (the last dimension's halves): silu(gate) * up; its backward
// keeps only y.
torch::Tensor swiglu(const torch::Tensor& y);

class ParallelMLPImpl : public torch::nn::Module {
 public:
  ParallelMLPImpl(const ModelSpec& model, TensorParallel tp = nullptr, const LayerConjugates& conjugates = {});
  torch::Tensor forward(const torch::Tensor& x);

  bool gated = false;  // SwiGLU: fc1's local output is [gate_i | up_i]
  ColumnParallelLinear fc1{nullptr};
  RowParallelLinear fc2{nullptr};
};
TORCH_MODULE(ParallelMLP);

// --- DeepSeek's multi-head latent attention (ModelSpec attention: mla) over a tensor group, as
// the layer plan states it (costmodel/plan/src/attention_plan.cpp, Megatron-core's
// MLASelfAttention):
//   x' = f(x)                                   (the region's entry)
//   q  = W_q_up  RMSNorm_q(W_q_down x')         (no query latent: W_q_up x')
//   [c | k_pe] = W_kv_down x'                   (c: kv_lora_rank, k_pe: qk_rope_head_dim)
//   [k_nope | v] = W_kv_up RMSNorm_kv(c)        (per head: qk_nope_head_dim, v_head_dim)
//   per head j: q_j = [q_nope_j | rope(q_pe_j)], k_j = [k_nope_j | rope(k_pe)],
//   context_j = softmax(q_j k_j^T / sqrt(dqk), causal) v_j
//   y = g(W_proj [context_0 .. context_{H-1}])
// with dqk = qk_nope_head_dim + qk_rope_head_dim and rope the rotate_half rotation of
// transformer_layer.hpp. The down projections and the latents' norms are whole on every
// tensor rank: their gradients on a rank cover its heads and are summed over the group
// (GPTModel::sequence_parallel_parameters). The up projections' rows and the output
// projection's columns are the rank's heads. FlashAttention runs with the values padded to
// dqk (its kernel takes one head width) and the padding dropped after. With sequence
// parallelism the down projections run on the rank's sequence shard and the latents are
// all-gathered (gather_sequence; their gradients reduce-scattered back), the output
// leaving by sp_scatter; without a query latent (q_lora_rank 0) that is refused.
class LatentAttentionImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when the group's degree does not divide the heads, with
  // sequence parallelism and no query latent, or for an odd qk_rope_head_dim.
  LatentAttentionImpl(const ModelSpec& model, TensorParallel tp = nullptr, const LayerConjugates& conjugates = {},
                      bool flash_attention = false);
  // x: [batch, seq, hidden] -> [batch, seq, hidden]
  torch::Tensor forward(const torch::Tensor& x);

  std::int64_t local_heads, nope, rope, value;  // this rank's heads; the widths per head
  bool flash_attention = false;
  bool sequence_parallel = false;  // the latents gathered from sequence shards
  RotaryTables rotary;  // [seq_len, qk_rope_head_dim]
  torch::Tensor q_down;   // [q_lora_rank, hidden] (undefined without a query latent), whole
  Norm q_norm{nullptr};   // over q_lora_rank, whole
  torch::Tensor q_up;     // [local_heads dqk, q_lora_rank or hidden]
  torch::Tensor kv_down;  // [kv_lora_rank + rope, hidden], whole
  Norm kv_norm{nullptr};  // over kv_lora_rank, whole
  torch::Tensor kv_up;    // [local_heads (nope + value), kv_lora_rank]
  RowParallelLinear proj{nullptr};

 private:
  TensorParallel tp_;
};
TORCH_MODULE(LatentAttention);


class TransformerLayerImpl : public torch::nn::Module {
 public:
  // With `moe`, the MLP is the mixture of experts over `ep` (expert_parallel.hpp).
  // `window`: the layer's sliding window (0: none; GPTModel's from ModelSpec's rule).
  // `flash_attention`: the job's attention kernel (ParallelAttention).
  TransformerLayerImpl(const ModelSpec& model, TensorParallel tp = nullptr, const LayerConjugates& conjugates = {},
                       bool moe = false, ExpertParallel ep = nullptr, ContextParallel cp = nullptr,
                       std::int64_t window = 0, bool flash_attention = false);
  torch::Tensor forward(const torch::Tensor& x);

  Norm ln1{nullptr}, ln2{nullptr};
  ParallelAttention attention{nullptr};  // unless multi-head latent attention:
  LatentAttention latent{nullptr};       // (registered as "attention" too)
  ParallelMLP mlp{nullptr};   // a dense layer's
  ExpertMLP experts{nullptr};  // a layer with experts' (instead of mlp)
};
TORCH_MODULE(TransformerLayer);

}  // namespace partune::backend
