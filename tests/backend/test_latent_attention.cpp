// DeepSeek's multi-head latent attention on the backend (LatentAttention) against its
// forward written out here with plain tensor ops in float64, from DeepSeek-V3's
// definition: c_q = W_dq x, q = W_uq RMSNorm(c_q) per head [q_nope | q_pe];
// [c_kv | k_pe] = W_dkv x; [k_nope | v] = W_ukv RMSNorm(c_kv) per head; q_pe and the
// shared k_pe rotated (rotate_half, theta 10000, positions 0 .. s-1, the rotation written
// as explicit cos / sin products here); causal softmax(q.k / sqrt(nope + rope)) v per
// head; y = W_o [context of every head]. Output and every parameter's gradient, to the
// float32 rounding of the module's rotary tables.
// LibTorch first: c10 defines a CHECK macro of its own; catch.hpp is included last.
#include <cmath>
#include <limits>
#include <string>

#include <torch/torch.h>

#include "partune/backend/transformer_layer.hpp"

#undef CHECK
#include <catch2/catch.hpp>

using namespace partune;
using namespace partune::backend;

namespace {

torch::Tensor rms(const torch::Tensor& x, const torch::Tensor& w) {
  return x / torch::sqrt(x.pow(2).mean(-1, true) + 1e-5) * w;
}

// x [b, s, H, d] at positions 0 .. s-1: dimension i < d/2 paired with i + d/2, angle
// p theta^(-2i/d).
torch::Tensor rotate(const torch::Tensor& x) {
  const auto s = x.size(1), d = x.size(3), half = d / 2;
  torch::Tensor out = torch::empty_like(x);
  for (std::int64_t p = 0; p < s; ++p)
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / d), c = std::cos(angle), sn = std::sin(angle);
      const torch::Tensor a = x.select(1, p).select(-1, i), b = x.select(1, p).select(-1, i + half);
      out.select(1, p).select(-1, i).copy_(a * c - b * sn);
      out.select(1, p).select(-1, i + half).copy_(b * c + a * sn);
    }
  return out;
}

}  // namespace

TEST_CASE("latent attention equals DeepSeek's forward written out, in output and gradients", "[backend][mla]") {
  ModelSpec c;
  c.hidden = 16;
  c.heads = c.kv_heads = 2;
  c.attention = AttentionKind::mla;
  c.q_lora_rank = 8;
  c.kv_lora_rank = 6;
  c.qk_nope_head_dim = 4;
  c.qk_rope_head_dim = 2;
  c.v_head_dim = 3;
  c.seq_len = 5;
  c.positions = PositionKind::rope;
  c.norm = NormKind::rmsnorm;
  c.bias = false;
  LatentAttention module(c);
  module->to(torch::kDouble);
  torch::manual_seed(3);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : module->parameters()) p.copy_(torch::randn(p.sizes(), torch::kDouble) * 0.5 + (p.dim() == 1 ? 1.0 : 0.0));
  }
  const torch::Tensor x = torch::randn({2, 5, 16}, torch::kDouble);
  const torch::Tensor w = torch::randn({2, 5, 16}, torch::kDouble);  // the loss's weights
  (module->forward(x) * w).sum().backward();

  // The same numbers, detached, by hand.
  const auto leaf = [](const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); };
  const torch::Tensor dq = leaf(module->q_down), nq = leaf(module->q_norm->weight), uq = leaf(module->q_up);
  const torch::Tensor dkv = leaf(module->kv_down), nkv = leaf(module->kv_norm->weight), ukv = leaf(module->kv_up);
  const torch::Tensor wo = leaf(module->proj->weight);
  const std::int64_t b = 2, s = 5, H = 2, nope = 4, rope = 2, v = 3, kl = 6;
  const torch::Tensor q = torch::matmul(rms(torch::matmul(x, dq.t()), nq), uq.t()).view({b, s, H, nope + rope});
  const torch::Tensor ckv = torch::matmul(x, dkv.t());
  const torch::Tensor kv = torch::matmul(rms(ckv.narrow(-1, 0, kl), nkv), ukv.t()).view({b, s, H, nope + v});
  const torch::Tensor k_pe = rotate(ckv.narrow(-1, kl, rope).unsqueeze(2)).expand({b, s, H, rope});
  const torch::Tensor query = torch::cat({q.narrow(-1, 0, nope), rotate(q.narrow(-1, nope, rope))}, -1).transpose(1, 2);
  const torch::Tensor key = torch::cat({kv.narrow(-1, 0, nope), k_pe}, -1).transpose(1, 2);
  const torch::Tensor value = kv.narrow(-1, nope, v).transpose(1, 2);
  const torch::Tensor future = torch::ones({s, s}, torch::kBool).triu(1);
  const torch::Tensor scores = (torch::matmul(query, key.transpose(-2, -1)) / std::sqrt(double(nope + rope)))
                                   .masked_fill(future, -std::numeric_limits<double>::infinity());
  const torch::Tensor context = torch::matmul(torch::softmax(scores, -1), value).transpose(1, 2).reshape({b, s, H * v});
  const torch::Tensor y = torch::matmul(context, wo.t());
  (y * w).sum().backward();

  // The module's rotary tables are computed in float64 and kept in float32 (rotary_tables),
  // so agreement is to float32's rounding of cos and sin, about 1e-8 here.
  CHECK((module->forward(x) - y).abs().max().item<double>() < 1e-6);
  const std::pair<torch::Tensor, torch::Tensor> grads[] = {
      {module->q_down, dq}, {module->q_norm->weight, nq}, {module->q_up, uq},      {module->kv_down, dkv},
      {module->kv_norm->weight, nkv}, {module->kv_up, ukv}, {module->proj->weight, wo}};
  for (const auto& [got, want] : grads)
    CHECK((got.grad() - want.grad()).abs().max().item<double>() < 1e-6 * want.grad().abs().max().item<double>() + 1e-9);
}
