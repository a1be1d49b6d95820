// Attention, MLP and the pre-LN layer (transformer_layer.hpp).
#include "partune/backend/transformer_layer.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace partune::backend {

namespace F = torch::nn::functional;

ParallelAttentionImpl::ParallelAttentionImpl(std::int64_t hidden_, std::int64_t heads_, int tensor_degree)
    : hidden(hidden_), heads(heads_) {
  if (heads <= 0 || hidden % heads != 0) throw std::invalid_argument("ParallelAttention: heads must divide hidden");
  qkv = register_module("qkv", ColumnParallelLinear(hidden, 3 * hidden, true, tensor_degree));
  proj = register_module("proj", RowParallelLinear(hidden, hidden, true, tensor_degree));
}

torch::Tensor ParallelAttentionImpl::forward(const torch::Tensor& x) {
  const std::int64_t b = x.size(0), s = x.size(1), d = hidden / heads;
  // [b, s, 3h] -> [b, s, 3, heads, d] -> three [b, heads, s, d]
  const torch::Tensor qkv_out = qkv(x).view({b, s, 3, heads, d}).permute({2, 0, 3, 1, 4});
  const torch::Tensor q = qkv_out[0], k = qkv_out[1], v = qkv_out[2];
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  const torch::Tensor future = torch::ones({s, s}, torch::kBool).triu(1);  // j > i: masked
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  const torch::Tensor ctx = torch::matmul(torch::softmax(scores, -1), v);  // [b, heads, s, d]
  return proj(ctx.permute({0, 2, 1, 3}).reshape({b, s, hidden}));
}

ParallelMLPImpl::ParallelMLPImpl(std::int64_t hidden, std::int64_t ffn_hidden, int tensor_degree) {
  fc1 = register_module("fc1", ColumnParallelLinear(hidden, ffn_hidden, true, tensor_degree));
  fc2 = register_module("fc2", RowParallelLinear(ffn_hidden, hidden, true, tensor_degree));
}

torch::Tensor ParallelMLPImpl::forward(const torch::Tensor& x) { return fc2(torch::gelu(fc1(x))); }

TransformerLayerImpl::TransformerLayerImpl(std::int64_t hidden, std::int64_t heads, std::int64_t ffn_hidden,
                                           int tensor_degree) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(kLayerNormEps)));
  attention = register_module("attention", ParallelAttention(hidden, heads, tensor_degree));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(kLayerNormEps)));
  mlp = register_module("mlp", ParallelMLP(hidden, ffn_hidden, tensor_degree));
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& x) {
  const torch::Tensor h = x + attention(ln1(x));
  return h + mlp(ln2(h));
}

}  // namespace partune::backend
