// Vectorised row operations of the online softmax (row_math.hpp).
#include "row_math.hpp"

#include <limits>

// One clone per instruction set, chosen when the program loads by the CPU it runs on.
// Sanitizer builds keep one plain version (target_clones' resolvers run before ASan's
// runtime is ready).
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__clang__)
#define PARTUNE_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PARTUNE_VECTOR_CLONES
#endif

namespace partune::kernels::detail {

PARTUNE_VECTOR_CLONES float row_max(const float* x, std::int64_t n) {
  float lane[kLanes];
  for (float& l : lane) l = -std::numeric_limits<float>::infinity();
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = lane[l] < x[i + l] ? x[i + l] : lane[l];
  float m = -std::numeric_limits<float>::infinity();
  for (; i < n; ++i) m = m < x[i] ? x[i] : m;
  for (float l : lane) m = m < l ? l : m;
  return m;
}

PARTUNE_VECTOR_CLONES float exp_shift_sum(float* x, std::int64_t n, float m) {
  if (m == -std::numeric_limits<float>::infinity()) {
    for (std::int64_t i = 0; i < n; ++i) x[i] = 0.0f;
    return 0.0f;
  }
  float lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      x[i + l] = exp_nonpositive(x[i + l] - m);
      lane[l] += x[i + l];
    }
  float sum = 0.0f;
  for (; i < n; ++i) {
    x[i] = exp_nonpositive(x[i] - m);
    sum += x[i];
  }
  for (float l : lane) sum += l;
  return sum;
}

PARTUNE_VECTOR_CLONES void scale_row(float* y, std::int64_t n, float a) {
  for (std::int64_t i = 0; i < n; ++i) y[i] *= a;
}

PARTUNE_VECTOR_CLONES float row_dot(const float* x, const float* y, std::int64_t n) {
  float lane[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] += x[i + l] * y[i + l];
  float sum = 0.0f;
  for (; i < n; ++i) sum += x[i] * y[i];
  for (float l : lane) sum += l;
  return sum;
}

PARTUNE_VECTOR_CLONES void softmax_grad_row(float* p, const float* dp, std::int64_t n, float d) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = p[i] * (dp[i] - d);
}

}  // namespace partune::kernels::detail
