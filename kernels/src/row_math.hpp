#pragma once
// The row operations of tiled attention's online softmax, on fp32 rows: written as
// straight loops over independent lanes so that the compiler vectorises them (no
// reduction needs reassociation: each of kLanes partial results is its own variable),
// compiled for AVX-512, AVX2 and baseline x86-64 and chosen at run time by the CPU
// (target_clones: GCC's function multi-versioning; see flash_attention_cpu.cpp).
#include <cstdint>

namespace partune::kernels::detail {

constexpr int kLanes = 16;

// e^x for x <= 0 (and -inf -> 0): x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6
// Taylor polynomial (relative error < 2e-7 on that range), 2^n put into the exponent
// bits. Branch-free, so a loop over it vectorises. Below -87 (2^-126) it returns 0.
inline float exp_nonpositive(float x) {
  const float clamped = x < -87.0f ? -87.0f : x;
  const float n = __builtin_floorf(clamped * 1.44269504088896341f + 0.5f);
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 in two parts
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  return x < -87.0f ? 0.0f : p * scale;
}

// The largest of x[0..n) (-inf when n is 0 or every entry is -inf).
float row_max(const float* x, std::int64_t n);

// x[i] = e^(x[i] - m) in place, returns the sum of the results; m = -inf gives zeros.
float exp_shift_sum(float* x, std::int64_t n, float m);

// y[i] *= a.
void scale_row(float* y, std::int64_t n, float a);

// Sum of x[i] * y[i].
float row_dot(const float* x, const float* y, std::int64_t n);

// p[i] = p[i] * (dp[i] - d): the softmax's backward, dS = P o (dP - rowsum(dO o O)).
void softmax_grad_row(float* p, const float* dp, std::int64_t n, float d);

}  // namespace partune::kernels::detail
