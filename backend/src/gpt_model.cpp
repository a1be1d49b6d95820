// The GPT decoder (gpt_model.hpp).
#include "partune/backend/gpt_model.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include <ATen/CPUGeneratorImpl.h>

namespace partune::backend {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

GPTModelImpl::GPTModelImpl(const BackendModelConfig& c, std::uint64_t seed, int tensor_degree) : config(c) {
  if (tensor_degree != 1) throw std::invalid_argument("GPTModel: tensor_degree > 1 is not built yet");
  wte = register_parameter("wte", torch::empty({c.vocab, c.hidden}));
  wpe = register_parameter("wpe", torch::empty({c.seq_len, c.hidden}));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int i = 0; i < c.layers; ++i) layers->push_back(TransformerLayer(c.hidden, c.heads, c.ffn_hidden, tensor_degree));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden}).eps(kLayerNormEps)));
  if (!c.tied_embeddings) lm_head = register_module("lm_head", ColumnParallelLinear(c.hidden, c.vocab, false, tensor_degree));

  // Deterministic initialisation, in registration order, from the model's own generator.
  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double residual_std = kInitStd / std::sqrt(2.0 * std::max(1, c.layers));
  for (auto& p : named_parameters(/*recurse=*/true)) {
    const std::string& name = p.key();
    torch::Tensor& t = p.value();
    if (name.find("ln") != std::string::npos && t.dim() == 1) {
      if (ends_with(name, "weight")) t.fill_(1.0);
      else t.zero_();
    } else if (ends_with(name, "bias")) {
      t.zero_();
    } else if (ends_with(name, "proj.weight") || ends_with(name, "fc2.weight")) {
      t.normal_(0.0, residual_std, gen);
    } else {
      t.normal_(0.0, kInitStd, gen);
    }
  }
}

torch::Tensor GPTModelImpl::embed(const torch::Tensor& tokens) {
  const std::int64_t s = tokens.size(1);
  if (s > config.seq_len) throw std::invalid_argument("GPTModel: sequence longer than seq_len");
  return torch::embedding(wte, tokens) + wpe.slice(0, 0, s);
}

torch::Tensor GPTModelImpl::layer(int i, const torch::Tensor& x) {
  return layers->ptr<TransformerLayerImpl>(static_cast<std::size_t>(i))->forward(x);
}

torch::Tensor GPTModelImpl::logits(const torch::Tensor& x) {
  const torch::Tensor h = ln_f(x);
  // Tied: logits = h E^T with E the token embedding [vocab, hidden].
  return config.tied_embeddings ? torch::matmul(h, wte.t()) : lm_head(h);
}

torch::Tensor GPTModelImpl::head_loss(const torch::Tensor& x, const torch::Tensor& targets) {
  const torch::Tensor z = logits(x);
  return torch::nn::functional::cross_entropy(z.reshape({-1, z.size(-1)}), targets.reshape({-1}));
}

torch::Tensor GPTModelImpl::forward(const torch::Tensor& tokens, const torch::Tensor& targets) {
  torch::Tensor x = embed(tokens);
  for (int i = 0; i < config.layers; ++i) x = layer(i, x);
  return head_loss(x, targets);
}

}  // namespace partune::backend
