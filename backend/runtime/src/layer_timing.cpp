#include "partune/backend/layer_timing.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/transformer_layer.hpp"
#include "partune/costmodel/model.hpp"

namespace partune::backend {

namespace {

constexpr int kRepeats = 50;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

kernels::LayerOverhead time_layer(kernels::LayerOverhead layer) {
  at::set_num_threads(1);
  ModelSpec config;  // GPT's block (ModelSpec's defaults) at the layer's shape
  config.layers = 1;
  config.hidden = layer.hidden;
  config.heads = config.kv_heads = layer.heads;
  config.ffn_hidden = layer.ffn_hidden;
  layer.samples.clear();
  for (int n : {8, 16, 32}) {
    config.seq_len = n;
    torch::manual_seed(0);
    TransformerLayer module(config);
    const torch::Tensor x = torch::randn({1, n, config.hidden}).requires_grad_(true);
    const torch::Tensor grad = torch::randn({1, n, config.hidden});
    std::vector<double> forward, backward;
    for (int i = 0; i < 2 * kRepeats; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      const torch::Tensor y = module->forward(x);
      const double f = seconds_since(t0);
      t0 = std::chrono::steady_clock::now();
      y.backward(grad);
      const double b = seconds_since(t0);
      if (i < kRepeats) continue;  // warm-up
      forward.push_back(f);
      backward.push_back(b);
    }
    layer.samples.push_back({n, median(forward), median(backward)});
  }
  return layer;
}

}  // namespace partune::backend
