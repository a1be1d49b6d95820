#pragma once
// A GPT-style decoder in the LibTorch C++ frontend: token + learned position embeddings,
// `layers` pre-LN transformer layers, a final LayerNorm and an LM head (the token
// embedding's transpose when the model ties them, else its own ColumnParallelLinear
// without bias), cross-entropy loss averaged over the tokens. fp32 on CPU.
//
// The pieces are separate calls (embed, layer, head_loss) because the executor runs a
// program layer by layer: the embedding belongs to the first layer's forward, the head and
// loss to the last one's (docs/architecture.md, section 2.2).
//
// Initialisation is a pure function of the seed (its own generator, not the global one),
// GPT-2 / Megatron style: weights ~ N(0, 0.02), the two residual output projections
// (attention proj, fc2) ~ N(0, 0.02 / sqrt(2 * layers)), biases 0, LayerNorm 1 and 0.
#include <cstdint>

#include <torch/torch.h>

#include "partune/backend/parallel_linear.hpp"
#include "partune/backend/scaling.hpp"
#include "partune/backend/transformer_layer.hpp"

namespace partune::backend {

constexpr double kInitStd = 0.02;

class GPTModelImpl : public torch::nn::Module {
 public:
  GPTModelImpl(const BackendModelConfig& config, std::uint64_t seed, int tensor_degree = 1);

  // tokens [batch, seq] (int64) -> [batch, seq, hidden]
  torch::Tensor embed(const torch::Tensor& tokens);
  // model layer i (0-based)
  torch::Tensor layer(int i, const torch::Tensor& x);
  // final LN + LM head: [batch, seq, hidden] -> logits [batch, seq, vocab]
  torch::Tensor logits(const torch::Tensor& x);
  // mean cross-entropy of logits(x) against targets [batch, seq]
  torch::Tensor head_loss(const torch::Tensor& x, const torch::Tensor& targets);
  // the whole model: embed, every layer, head_loss
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& targets);

  BackendModelConfig config;
  torch::Tensor wte;  // [vocab, hidden]
  torch::Tensor wpe;  // [seq_len, hidden]
  torch::nn::ModuleList layers;
  torch::nn::LayerNorm ln_f{nullptr};
  ColumnParallelLinear lm_head{nullptr};  // only when the embeddings are not tied
};
TORCH_MODULE(GPTModel);

}  // namespace partune::backend
