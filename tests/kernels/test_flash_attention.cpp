// FlashAttention on the CPU against the standard path, written out here with LibTorch's
// own ops in float64 (softmax(q k^T / sqrt(d) + mask) v, and its gradients by autograd):
// output and the gradients of q, k and v within 1e-5, causal and not, for sequence lengths
// that are and are not multiples of the block sizes; and its extra memory, counted by the
// backend's allocator, linear in the sequence length where the standard path's is
// quadratic.
// LibTorch first: c10 defines a CHECK macro of its own that would silently replace
// Catch's; it is undefined and catch.hpp included last.
#include <cmath>
#include <limits>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "partune/backend/memory_accounting.hpp"
#include "partune/kernels/flash_attention.hpp"

#undef CHECK
#include <catch2/catch.hpp>

using partune::kernels::FlashAttentionOptions;
using partune::kernels::flash_attention;

namespace {

// The reference in float64: no tiling, no online softmax, no shared code with the kernel.
torch::Tensor reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  const std::int64_t s = q.size(2);
  torch::Tensor scores = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(q.size(3)));
  if (causal) {
    const torch::Tensor future = torch::ones({s, s}, torch::kBool).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  }
  return torch::matmul(torch::softmax(scores, -1), v);
}

struct Grads {
  torch::Tensor out, dq, dk, dv;
};

// Forward with `attend`, backward of sum(out * w) for a fixed random w.
template <typename Attend>
Grads run(Attend attend, const torch::Tensor& q0, const torch::Tensor& k0, const torch::Tensor& v0,
          const torch::Tensor& w, torch::Dtype dtype) {
  const auto leaf = [&](const torch::Tensor& t) { return t.to(dtype).clone().requires_grad_(); };
  torch::Tensor q = leaf(q0), k = leaf(k0), v = leaf(v0);
  torch::Tensor out = attend(q, k, v);
  (out * w.to(dtype)).sum().backward();
  return {out.to(torch::kFloat64).detach(), q.grad().to(torch::kFloat64), k.grad().to(torch::kFloat64),
          v.grad().to(torch::kFloat64)};
}

double max_abs_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("flash attention equals standard attention, forward and gradients", "[kernels][flash]") {
  torch::manual_seed(7);
  const FlashAttentionOptions blocks{16, 32};
  // seq 64 and 96: multiples of both blocks; 1, 37 and 100: not.
  for (const std::int64_t seq : {1, 37, 64, 96, 100}) {
    for (const bool causal : {true, false}) {
      INFO("seq " << seq << (causal ? " causal" : " full"));
      const torch::Tensor q = torch::randn({2, 3, seq, 16}, torch::kFloat64);
      const torch::Tensor k = torch::randn({2, 3, seq, 16}, torch::kFloat64);
      const torch::Tensor v = torch::randn({2, 3, seq, 16}, torch::kFloat64);
      const torch::Tensor w = torch::randn({2, 3, seq, 16}, torch::kFloat64);
      const Grads ref = run([&](auto& a, auto& b, auto& c) { return reference(a, b, c, causal); }, q, k, v, w,
                            torch::kFloat64);
      const Grads flash = run([&](auto& a, auto& b, auto& c) { return flash_attention(a, b, c, causal, blocks); }, q,
                              k, v, w, torch::kFloat32);
      CHECK(max_abs_diff(flash.out, ref.out) < 1e-5);
      CHECK(max_abs_diff(flash.dq, ref.dq) < 1e-5);
      CHECK(max_abs_diff(flash.dk, ref.dk) < 1e-5);
      CHECK(max_abs_diff(flash.dv, ref.dv) < 1e-5);
    }
  }
}

// With fewer heads than threads the backward splits each head by key block, every thread
// adding its share of dq into a partial of its own; with more, by head. Both against the
// reference, on 2 and 3 threads.
TEST_CASE("flash attention's threaded backward gives the same gradients either way", "[kernels][flash]") {
  const int before = at::get_num_threads();
  for (const int threads : {2, 3}) {
    at::set_num_threads(threads);
    for (const std::int64_t heads : {1, 4}) {
      INFO(threads << " threads, " << heads << " heads");
      torch::manual_seed(11);
      const torch::Tensor q = torch::randn({1, heads, 90, 8}, torch::kFloat64);
      const torch::Tensor k = torch::randn({1, heads, 90, 8}, torch::kFloat64);
      const torch::Tensor v = torch::randn({1, heads, 90, 8}, torch::kFloat64);
      const torch::Tensor w = torch::randn({1, heads, 90, 8}, torch::kFloat64);
      const Grads ref = run([&](auto& a, auto& b, auto& c) { return reference(a, b, c, true); }, q, k, v, w,
                            torch::kFloat64);
      const Grads flash = run([&](auto& a, auto& b, auto& c) { return flash_attention(a, b, c, true, {16, 16}); }, q,
                              k, v, w, torch::kFloat32);
      CHECK(max_abs_diff(flash.out, ref.out) < 1e-5);
      CHECK(max_abs_diff(flash.dq, ref.dq) < 1e-5);
      CHECK(max_abs_diff(flash.dk, ref.dk) < 1e-5);
      CHECK(max_abs_diff(flash.dv, ref.dv) < 1e-5);
    }
  }
  at::set_num_threads(before);
}

TEST_CASE("flash attention reads q, k, v as views into one fused projection", "[kernels][flash]") {
  // The backend's layout: [b, s, 3, heads, d] permuted to three [b, heads, s, d] views.
  torch::manual_seed(3);
  const torch::Tensor qkv = torch::randn({2, 50, 3, 4, 8});
  const torch::Tensor parts = qkv.permute({2, 0, 3, 1, 4});
  const torch::Tensor flash = flash_attention(parts[0], parts[1], parts[2], true, {16, 16});
  const torch::Tensor ref = reference(parts[0].to(torch::kFloat64), parts[1].to(torch::kFloat64),
                                      parts[2].to(torch::kFloat64), true);
  CHECK(max_abs_diff(flash.to(torch::kFloat64), ref) < 1e-5);
}

TEST_CASE("flash attention refuses inputs it cannot take, naming why", "[kernels][flash]") {
  const torch::Tensor q = torch::randn({1, 2, 8, 4});
  CHECK_THROWS_WITH(flash_attention(q, q, q.to(torch::kFloat64), true),
                    "flash_attention: q, k and v must have one dtype");
  CHECK_THROWS_WITH(flash_attention(q, q, torch::randn({1, 2, 9, 4}), true),
                    "flash_attention: q, k and v must have one shape");
  CHECK_THROWS_WITH(flash_attention(q[0], q[0], q[0], true),
                    "flash_attention: q, k and v must be [batch, heads, seq, head_dim]");
  CHECK_THROWS_WITH(flash_attention(q, q, q, true, {0, 16}), "flash_attention: block sizes must be at least 1");
}

namespace {

// Peak tensor bytes above those in use before, of one forward and backward at this length.
template <typename Attend>
std::int64_t extra_peak_bytes(Attend attend, std::int64_t seq) {
  torch::manual_seed(1);
  torch::Tensor q = torch::randn({1, 2, seq, 32}).requires_grad_();
  torch::Tensor k = torch::randn({1, 2, seq, 32}).requires_grad_();
  torch::Tensor v = torch::randn({1, 2, seq, 32}).requires_grad_();
  const torch::Tensor w = torch::randn({1, 2, seq, 32});
  const std::int64_t before = partune::backend::cpu_tensor_bytes_in_use();
  partune::backend::reset_cpu_tensor_bytes_peak();
  (attend(q, k, v) * w).sum().backward();
  return partune::backend::cpu_tensor_bytes_peak() - before;
}

}  // namespace

TEST_CASE("flash attention's extra memory grows linearly with the sequence, standard's quadratically",
          "[kernels][flash][memory]") {
  partune::backend::install_cpu_memory_accounting();
  const auto flash = [](auto& q, auto& k, auto& v) { return flash_attention(q, k, v, true); };
  const auto standard = [](auto& q, auto& k, auto& v) { return partune::kernels::standard_attention(q, k, v, true); };
  const std::int64_t f1 = extra_peak_bytes(flash, 1024), f2 = extra_peak_bytes(flash, 2048),
                     f4 = extra_peak_bytes(flash, 4096);
  const std::int64_t s1 = extra_peak_bytes(standard, 1024), s2 = extra_peak_bytes(standard, 2048);
  INFO("flash " << f1 << " " << f2 << " " << f4 << " standard " << s1 << " " << s2);
  // Linear: each doubling at most doubles it (plus the fixed tiles), and the steps are
  // alike (a quadratic term would make the second step twice the first).
  CHECK(f2 <= 2 * f1 + (1 << 20));
  CHECK(f4 <= 2 * f2 + (1 << 20));
  CHECK(static_cast<double>(f4 - f2) == Approx(2.0 * static_cast<double>(f2 - f1)).epsilon(0.1));
  // The standard path holds the 2 x s x s scores several times over: 4x per doubling.
  CHECK(static_cast<double>(s2) > 3.5 * static_cast<double>(s1));
  CHECK(s2 > 10 * f2);
}
