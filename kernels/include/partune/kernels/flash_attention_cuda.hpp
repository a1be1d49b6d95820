#pragma once
// FlashAttention on a CUDA device (Dao et al., FlashAttention v1/v2): the CUDA twin of the
// CPU kernel in flash_attention.hpp. Exact attention softmax(q k^T * scale) v computed tile
// by tile in shared memory with an online softmax (running max and running sum), so no
// seq x seq matrix is ever stored in global memory. The forward also writes each query
// row's log-sum-exp (fp32); the backward recomputes the probabilities from it.
//
// Plain C++: no CUDA and no LibTorch headers, so translation units compiled by the host
// compiler can include it. Defined in kernels/src/flash_attention_cuda_*.cu (target
// partune::kernels_cuda, built only when a CUDA toolkit is found).
//
// Layout: q, k, v, out, dout, dq, dk, dv are contiguous [batch_heads, seq_len, head_dim]
// arrays of the element type (fp16 or bf16); lse is fp32 [batch_heads, seq_len]. All
// pointers are device pointers. Accumulation is fp32 throughout. Causal: key j is hidden
// from query i when j > i. Calls are asynchronous on `stream` (a cudaStream_t passed as
// void*; nullptr is the default stream).
//
// Errors: std::invalid_argument for an unsupported element type, a head_dim other than 64
// or 128, a negative size, a non-finite scale, a sequence longer than the launch grid
// allows (65535 * 32 rows), or a null pointer where data is needed; std::runtime_error
// naming the CUDA error when a kernel launch (or its set-up) fails. Faults during the
// kernels' execution surface at the caller's next synchronisation, as usual for CUDA.
#include <cstddef>

namespace partune::kernels::cuda {

enum class ElementType { f16, bf16 };

struct AttentionShape {
  int batch_heads = 0;  // batch * heads: independent attention problems
  int seq_len = 0;      // queries = keys per problem; any length >= 0 (0: nothing to do)
  int head_dim = 0;     // 64 or 128
  bool causal = false;  // hide key j from query i when j > i
  float scale = 0.f;    // applied to q.k before the softmax, usually 1/sqrt(head_dim)
};

// out = softmax(q k^T * scale [causal mask]) v; lse[i] = log(sum_j exp(q_i.k_j * scale)).
void flash_attention_forward(ElementType type, const AttentionShape& shape, const void* q,
                             const void* k, const void* v, void* out, float* lse, void* stream);

// Gradients of the forward above: dq, dk, dv from dout, recomputing the probabilities block
// by block from lse (out and lse are the forward's results for the same q, k, v).
// workspace: device memory of flash_attention_backward_workspace_bytes(shape) bytes, any
// contents on entry. It holds, in order, the fp32 dQ accumulator [batch_heads, seq_len,
// head_dim] (key blocks add into it with atomicAdd; a last pass converts it into dq) and
// D [batch_heads, seq_len] = rowsum(dout * out). dq, dk, dv are fully overwritten.
void flash_attention_backward(ElementType type, const AttentionShape& shape, const void* q,
                              const void* k, const void* v, const void* out,
                              const void* dout, const float* lse, void* dq, void* dk,
                              void* dv, float* workspace, void* stream);

// Bytes of fp32 workspace the backward needs for this shape:
// 4 * batch_heads * seq_len * (head_dim + 1). Throws std::invalid_argument like the kernels.
std::size_t flash_attention_backward_workspace_bytes(const AttentionShape& shape);

}  // namespace partune::kernels::cuda
