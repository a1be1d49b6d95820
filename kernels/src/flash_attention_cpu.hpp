#pragma once
// The tiles of FlashAttention on one (sequence, head) on the CPU, fp32, row-major
// [seq, head_dim] operands: no LibTorch here (flash_attention.cpp wraps them as an
// autograd function and spreads (batch x heads, block) over threads). A row is head_dim
// contiguous floats.
#include <cstdint>

namespace partune::kernels::detail {

struct TileShape {
  std::int64_t seq = 0, head_dim = 0;
  // Row strides of q, k, v (their rows may be a view into a fused QKV projection) and of
  // out (written [batch, seq, heads, head_dim], so that the heads' merge is a view);
  // dout, dq, dk and dv are dense: head_dim.
  std::int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0;
  std::int64_t block_q = 128, block_k = 256;
  bool causal = true;
  float scale = 1.0f;  // of the scores: 1/sqrt(head_dim)
  std::int64_t query_blocks() const { return (seq + block_q - 1) / block_q; }
  std::int64_t key_blocks() const { return (seq + block_k - 1) / block_k; }
};

// Floats of scratch each call below needs.
std::int64_t forward_work_floats(const TileShape& s);
std::int64_t backward_work_floats(const TileShape& s);

// Rows [block * block_q, ...) of the output and their log-sum-exp: the key blocks visited
// in order, each one's scores S = scale Q K^T held in `work` only, folded into the output
// by the online softmax (running max m and sum l per row; the rows already accumulated
// are rescaled by e^(m_old - m_new)). out = acc / l, lse = m + ln l.
void flash_forward_query_block(const TileShape& s, const float* q, const float* k, const float* v, float* out,
                               float* lse, std::int64_t block, float* work);

// Key block `block`'s gradients dk, dv (written) and its share of dq (added to dq, which
// the caller zeroes): every query block that sees it recomputes P = e^(S - lse) from the
// saved log-sum-exp, then dV += P^T dO, dP = dO V^T, dS = P o (dP - D), dQ += scale dS K,
// dK += scale dS^T Q, with D = rowsum(dO o O) given per row in `d_row`.
void flash_backward_key_block(const TileShape& s, const float* q, const float* k, const float* v, const float* dout,
                              const float* lse, const float* d_row, float* dq, float* dk, float* dv, std::int64_t block,
                              float* work);

// Row-major C (m x n) = alpha op(A) op(B) + beta C through the BLAS LibTorch uses (sgemm).
void gemm_rows(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
               const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
               std::int64_t ldc);

}  // namespace partune::kernels::detail
