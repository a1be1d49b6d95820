// gpt-oss's attention core on the backend (windowed_attention, transformer_layer.hpp): a
// sliding window and attention sinks against the definition written out here with plain
// loops in float64 — query i attends to keys max(0, i - w + 1) .. i, and the sink's
// exp(sink) joins the softmax's denominator without a value — for the output and, through
// autograd, the sinks' gradient against a finite difference.
// LibTorch first: c10 defines a CHECK macro of its own; catch.hpp is included last.
#include <cmath>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/transformer_layer.hpp"

#undef CHECK
#include <catch2/catch.hpp>

namespace {

// out[b, h, i] = sum_j p_ij v[b, h, j], p_ij = exp(s_ij) / (sink term + sum_j' exp(s_ij'))
// over the allowed j, s_ij = q_i . k_j / sqrt(d); loops, float64.
torch::Tensor by_hand(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, std::int64_t window,
                      const std::vector<double>& sinks) {
  const auto B = q.size(0), H = q.size(1), S = q.size(2), D = q.size(3);
  auto out = torch::zeros({B, H, S, D}, torch::kDouble);
  auto qa = q.accessor<double, 4>(), ka = k.accessor<double, 4>(), va = v.accessor<double, 4>();
  auto oa = out.accessor<double, 4>();
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < S; ++i) {
        const int first = window > 0 ? std::max<int>(0, i - static_cast<int>(window) + 1) : 0;
        std::vector<double> e(S, 0.0);
        double denominator = sinks.empty() ? 0.0 : std::exp(sinks[h]);
        for (int j = first; j <= i; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += qa[b][h][i][d] * ka[b][h][j][d];
          e[j] = std::exp(dot / std::sqrt(static_cast<double>(D)));
          denominator += e[j];
        }
        for (int j = first; j <= i; ++j)
          for (int d = 0; d < D; ++d) oa[b][h][i][d] += e[j] / denominator * va[b][h][j][d];
      }
  return out;
}

}  // namespace

TEST_CASE("windowed attention: a sliding window and sinks equal their definition", "[backend][window]") {
  torch::manual_seed(7);
  const auto opts = torch::dtype(torch::kDouble);
  const torch::Tensor q = torch::randn({2, 3, 7, 4}, opts), k = torch::randn({2, 3, 7, 4}, opts),
                      v = torch::randn({2, 3, 7, 4}, opts);
  const std::vector<double> sink_values = {0.5, -1.0, 2.0};
  const torch::Tensor sinks = torch::tensor(sink_values, opts);
  for (std::int64_t window : {0, 1, 3, 7, 10}) {
    INFO("window " << window);
    const torch::Tensor plain = partune::backend::windowed_attention(q, k, v, window, torch::Tensor());
    CHECK((plain - by_hand(q, k, v, window, {})).abs().max().item<double>() < 1e-12);
    const torch::Tensor sunk = partune::backend::windowed_attention(q, k, v, window, sinks);
    CHECK((sunk - by_hand(q, k, v, window, sink_values)).abs().max().item<double>() < 1e-12);
  }
  // A window of 1: each query sees itself alone, so without sinks the output is v.
  CHECK((partune::backend::windowed_attention(q, k, v, 1, torch::Tensor()) - v).abs().max().item<double>() < 1e-12);
}

TEST_CASE("windowed attention: the sinks' gradient is the loss's slope", "[backend][window]") {
  torch::manual_seed(11);
  const auto opts = torch::dtype(torch::kDouble);
  const torch::Tensor q = torch::randn({1, 2, 6, 4}, opts), k = torch::randn({1, 2, 6, 4}, opts),
                      v = torch::randn({1, 2, 6, 4}, opts), w = torch::randn({1, 2, 6, 4}, opts);
  torch::Tensor sinks = torch::tensor(std::vector<double>{0.3, -0.7}, opts).requires_grad_(true);
  const auto loss = [&](const torch::Tensor& s) {
    return (partune::backend::windowed_attention(q, k, v, 3, s) * w).sum();
  };
  loss(sinks).backward();
  const double eps = 1e-6;
  for (int h = 0; h < 2; ++h) {
    torch::NoGradGuard no_grad;
    torch::Tensor up = sinks.detach().clone(), down = sinks.detach().clone();
    up[h] += eps;
    down[h] -= eps;
    const double slope = (loss(up).item<double>() - loss(down).item<double>()) / (2 * eps);
    INFO("head " << h);
    CHECK(sinks.grad()[h].item<double>() == Approx(slope).epsilon(1e-6));
  }
}
