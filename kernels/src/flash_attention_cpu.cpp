// FlashAttention's tiles on the CPU (flash_attention_cpu.hpp), after Dao et al. 2022:
// the products of a tile go to the BLAS (sgemm on blocks of 128 x 256 scores, in the
// cache), the online softmax to the vectorised row loops of row_math.hpp. The s x s
// scores exist one tile at a time.
#include "flash_attention_cpu.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "row_math.hpp"

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc);

namespace partune::kernels::detail {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// The key range [begin, end) of a key block that query row i may see.
struct Span {
  std::int64_t begin, end;
};

// Masks, in a tile of rows [q0, q0 + rows) by keys [k0, k0 + cols), the keys after each
// row's query (causal): they get -inf, so e^(s - m) is 0 there.
void mask_future(float* tile, std::int64_t rows, std::int64_t cols, std::int64_t q0, std::int64_t k0) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t first_masked = std::max<std::int64_t>(0, q0 + r + 1 - k0);
    for (std::int64_t c = first_masked; c < cols; ++c) tile[r * cols + c] = kMinusInf;
  }
}

// The key blocks a query block [q0, q1) sees: all of them, or under the causal mask those
// starting at or before its last query.
std::int64_t key_blocks_seen(const TileShape& s, std::int64_t q1) {
  if (!s.causal) return s.key_blocks();
  return std::min(s.key_blocks(), (q1 - 1) / s.block_k + 1);
}

Span rows_of(std::int64_t block, std::int64_t size, std::int64_t seq) {
  return {block * size, std::min(seq, (block + 1) * size)};
}

}  // namespace

void gemm_rows(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
               const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
               std::int64_t ldc) {
  // A row-major matrix is its transpose in column-major order: C^T = op(B)^T op(A)^T.
  const char ta = transpose_a ? 'T' : 'N', tb = transpose_b ? 'T' : 'N';
  const int M = static_cast<int>(n), N = static_cast<int>(m), K = static_cast<int>(k);
  const int LDA = static_cast<int>(ldb), LDB = static_cast<int>(lda), LDC = static_cast<int>(ldc);
  sgemm_(&tb, &ta, &M, &N, &K, &alpha, b, &LDA, a, &LDB, &beta, c, &LDC);
}

std::int64_t forward_work_floats(const TileShape& s) { return s.block_q * s.block_k + 2 * s.block_q; }
std::int64_t backward_work_floats(const TileShape& s) { return 2 * s.block_q * s.block_k; }

void flash_forward_query_block(const TileShape& s, const float* q, const float* k, const float* v, float* out,
                               float* lse, std::int64_t block, float* work) {
  const std::int64_t d = s.head_dim;
  const Span qs = rows_of(block, s.block_q, s.seq);
  const std::int64_t rows = qs.end - qs.begin;
  float* tile = work;                          // rows x block_k scores, then probabilities
  float* m = work + s.block_q * s.block_k;     // running max per row
  float* l = m + s.block_q;                    // running sum per row
  float* acc = out + qs.begin * s.ldo;         // the output rows accumulate in place
  for (std::int64_t r = 0; r < rows; ++r) std::fill(acc + r * s.ldo, acc + r * s.ldo + d, 0.0f);
  std::fill(m, m + rows, kMinusInf);
  std::fill(l, l + rows, 0.0f);
  for (std::int64_t kb = 0; kb < key_blocks_seen(s, qs.end); ++kb) {
    const Span ks = rows_of(kb, s.block_k, s.seq);
    const std::int64_t cols = ks.end - ks.begin;
    gemm_rows(false, true, rows, cols, d, s.scale, q + qs.begin * s.ldq, s.ldq, k + ks.begin * s.ldk, s.ldk, 0.0f, tile,
              cols);
    if (s.causal && ks.end > qs.begin + 1) mask_future(tile, rows, cols, qs.begin, ks.begin);
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = tile + r * cols;
      const float m_new = std::max(m[r], row_max(row, cols));
      const float correction = m[r] == kMinusInf ? 0.0f : std::exp(m[r] - m_new);
      l[r] = l[r] * correction + exp_shift_sum(row, cols, m_new);
      if (correction != 1.0f) scale_row(acc + r * s.ldo, d, correction);
      m[r] = m_new;
    }
    gemm_rows(false, false, rows, d, cols, 1.0f, tile, cols, v + ks.begin * s.ldv, s.ldv, 1.0f, acc, s.ldo);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    scale_row(acc + r * s.ldo, d, 1.0f / l[r]);
    lse[qs.begin + r] = m[r] + std::log(l[r]);
  }
}

void flash_backward_key_block(const TileShape& s, const float* q, const float* k, const float* v, const float* dout,
                              const float* lse, const float* d_row, float* dq, float* dk, float* dv, std::int64_t block,
                              float* work) {
  const std::int64_t d = s.head_dim;
  const Span ks = rows_of(block, s.block_k, s.seq);
  const std::int64_t cols = ks.end - ks.begin;
  float* p = work;                       // rows x cols probabilities, then dS
  float* dp = work + s.block_q * s.block_k;
  float* dk_rows = dk + ks.begin * d;
  float* dv_rows = dv + ks.begin * d;
  std::fill(dk_rows, dk_rows + cols * d, 0.0f);
  std::fill(dv_rows, dv_rows + cols * d, 0.0f);
  // Under the causal mask the query blocks before this key block see none of it.
  const std::int64_t first = s.causal ? ks.begin / s.block_q : 0;
  for (std::int64_t qb = first; qb < s.query_blocks(); ++qb) {
    const Span qs = rows_of(qb, s.block_q, s.seq);
    const std::int64_t rows = qs.end - qs.begin;
    const float* q_rows = q + qs.begin * s.ldq;
    const float* do_rows = dout + qs.begin * d;
    gemm_rows(false, true, rows, cols, d, s.scale, q_rows, s.ldq, k + ks.begin * s.ldk, s.ldk, 0.0f, p, cols);
    if (s.causal && ks.end > qs.begin + 1) mask_future(p, rows, cols, qs.begin, ks.begin);
    for (std::int64_t r = 0; r < rows; ++r) exp_shift_sum(p + r * cols, cols, lse[qs.begin + r]);
    gemm_rows(true, false, cols, d, rows, 1.0f, p, cols, do_rows, d, 1.0f, dv_rows, d);          // dV += P^T dO
    gemm_rows(false, true, rows, cols, d, 1.0f, do_rows, d, v + ks.begin * s.ldv, s.ldv, 0.0f, dp, cols);  // dP = dO V^T
    for (std::int64_t r = 0; r < rows; ++r) softmax_grad_row(p + r * cols, dp + r * cols, cols, d_row[qs.begin + r]);
    gemm_rows(false, false, rows, d, cols, s.scale, p, cols, k + ks.begin * s.ldk, s.ldk, 1.0f, dq + qs.begin * d, d);
    gemm_rows(true, false, cols, d, rows, s.scale, p, cols, q_rows, s.ldq, 1.0f, dk_rows, d);
  }
}

}  // namespace partune::kernels::detail
