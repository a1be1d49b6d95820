// Attention, MLP and the pre-LN layer (transformer_layer.hpp).
#include "partune/backend/transformer_layer.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace partune::backend {

namespace F = torch::nn::functional;

ParallelAttentionImpl::ParallelAttentionImpl(std::int64_t hidden_, std::int64_t heads_, TensorParallel tp,
                                             const LayerConjugates& conjugates)
    : hidden(hidden_), heads(heads_) {
  if (heads <= 0 || hidden % heads != 0) throw std::invalid_argument("ParallelAttention: heads must divide hidden");
  local_heads = tensor_slice(heads, tp ? tp->degree() : 1, tp ? tp->rank() : 0, "heads").size;
  qkv = register_module("qkv", ColumnParallelLinear(hidden, 3 * hidden, true, tp, conjugates.attention_in));
  proj = register_module("proj", RowParallelLinear(hidden, hidden, true, tp, conjugates.attention_out));
}

torch::Tensor ParallelAttentionImpl::forward(const torch::Tensor& x) {
  // Local [b, s, 3 local_heads d] -> [b, s, 3, local_heads, d] -> three [b, local_heads, s, d]
  // (the whole layer's rows are sliced per head to match: GPTModel's initialisation). The
  // whole sequence: x may be a sequence shard that qkv's sp_gather completes.
  const torch::Tensor qkv_whole = qkv(x);
  const std::int64_t b = qkv_whole.size(0), s = qkv_whole.size(1), d = hidden / heads;
  const torch::Tensor qkv_out = qkv_whole.view({b, s, 3, local_heads, d}).permute({2, 0, 3, 1, 4});
  const torch::Tensor q = qkv_out[0], k = qkv_out[1], v = qkv_out[2];
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  const torch::Tensor future = torch::ones({s, s}, torch::kBool).triu(1);  // j > i: masked
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  const torch::Tensor ctx = torch::matmul(torch::softmax(scores, -1), v);  // [b, local_heads, s, d]
  // The local heads' context is this rank's column block of proj's input.
  return proj(ctx.permute({0, 2, 1, 3}).reshape({b, s, local_heads * d}));
}

ParallelMLPImpl::ParallelMLPImpl(std::int64_t hidden, std::int64_t ffn_hidden, TensorParallel tp,
                                 const LayerConjugates& conjugates) {
  fc1 = register_module("fc1", ColumnParallelLinear(hidden, ffn_hidden, true, tp, conjugates.mlp_in));
  fc2 = register_module("fc2", RowParallelLinear(ffn_hidden, hidden, true, tp, conjugates.mlp_out));
}

torch::Tensor ParallelMLPImpl::forward(const torch::Tensor& x) { return fc2(torch::gelu(fc1(x))); }

TransformerLayerImpl::TransformerLayerImpl(std::int64_t hidden, std::int64_t heads, std::int64_t ffn_hidden,
                                           TensorParallel tp, const LayerConjugates& conjugates) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(kLayerNormEps)));
  attention = register_module("attention", ParallelAttention(hidden, heads, tp, conjugates));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(kLayerNormEps)));
  mlp = register_module("mlp", ParallelMLP(hidden, ffn_hidden, tp, conjugates));
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& x) {
  const torch::Tensor h = x + attention(ln1(x));
  return h + mlp(ln2(h));
}

}  // namespace partune::backend
