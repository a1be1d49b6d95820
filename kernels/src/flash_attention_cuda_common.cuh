#pragma once
// Pieces shared by the CUDA FlashAttention forward and backward: element conversions, warp
// reductions, the shared-memory tile loader, shape checks and the (element type, head_dim)
// dispatch. Device code only reaches fp32 through to_float/from_float.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "partune/kernels/flash_attention_cuda.hpp"

namespace partune::kernels::cuda::detail {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarp = 0xffffffffu;
// A launch grid's y dimension counts query or key tiles of at least 32 rows, and holds at
// most 65535 blocks.
constexpr int kMaxSeqLen = 65535 * 32;

// ---- element conversions (fp16 / bf16 storage, fp32 arithmetic) ----
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// ---- warp reductions: every lane gets the result ----
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(kFullWarp, x, offset));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(kFullWarp, x, offset);
  return x;
}

// Shared tiles hold fp32 rows of head_dim values with a row stride of head_dim + 1: with
// head_dim a multiple of 32, lane l reading element d of row l hits bank (l + d) % 32, so a
// warp reading one column (one key per lane) is free of bank conflicts, and a warp reading
// one row (one dimension per lane) is too.
template <int D>
__host__ __device__ constexpr int tile_stride() {
  return D + 1;
}

// Dot product of two fp32 rows of length D in shared memory.
template <int D>
__device__ __forceinline__ float row_dot(const float* a, const float* b) {
  float sum = 0.f;
#pragma unroll 16
  for (int d = 0; d < D; ++d) sum = fmaf(a[d], b[d], sum);
  return sum;
}

// Copies rows [first_row, first_row + rows) of one head's [seq_len, D] matrix into a shared
// tile as fp32 times `factor`. Rows at or past seq_len (the ragged tail) are zero, so they
// add nothing to any product. All threads of the block take part.
template <typename T, int D>
__device__ void load_tile(float* tile, const T* head, int first_row, int rows, int seq_len,
                          float factor) {
  for (int index = threadIdx.x; index < rows * D; index += blockDim.x) {
    const int r = index / D;
    const int d = index % D;
    const int row = first_row + r;
    const float x = row < seq_len ? to_float(head[std::int64_t(row) * D + d]) * factor : 0.f;
    tile[r * tile_stride<D>() + d] = x;
  }
}

// Offset of head `bh`'s first element in a [batch_heads, seq_len, width] array.
__host__ __device__ __forceinline__ std::int64_t head_offset(int bh, int seq_len, int width) {
  return std::int64_t(bh) * seq_len * width;
}

inline int ceil_div(int a, int b) { return (a + b - 1) / b; }

// ---- host side: errors, shape checks, dispatch ----
inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("flash_attention (CUDA): ") + what + ": " +
                             cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                             ")");
}

inline void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("flash_attention (CUDA): " + what);
}

// Checks what every entry point needs.
inline void validate_shape(const AttentionShape& s) {
  require(s.head_dim == 64 || s.head_dim == 128,
          "head_dim " + std::to_string(s.head_dim) + " is not supported (64 or 128)");
  require(s.batch_heads >= 0 && s.seq_len >= 0,
          "negative size (batch_heads " + std::to_string(s.batch_heads) + ", seq_len " +
              std::to_string(s.seq_len) + ")");
  require(std::isfinite(s.scale), "scale is not finite");
  require(s.seq_len <= kMaxSeqLen, "seq_len " + std::to_string(s.seq_len) +
                                       " is too long (at most " + std::to_string(kMaxSeqLen) +
                                       ")");
}

// Tag carrying the compile-time (element type, head_dim) of one kernel instantiation.
template <typename T, int D>
struct Instance {
  using Element = T;
  static constexpr int kHeadDim = D;
};

// Calls fn(Instance<T, D>{}) for the runtime (type, head_dim); validate_shape has
// already accepted head_dim.
template <typename Fn>
void dispatch(ElementType type, int head_dim, Fn&& fn) {
  const bool wide = head_dim == 128;
  switch (type) {
    case ElementType::f16:
      return wide ? fn(Instance<__half, 128>{}) : fn(Instance<__half, 64>{});
    case ElementType::bf16:
      return wide ? fn(Instance<__nv_bfloat16, 128>{}) : fn(Instance<__nv_bfloat16, 64>{});
  }
  require(false, "unknown element type " + std::to_string(static_cast<int>(type)));
}

// Lets a kernel use `bytes` of dynamic shared memory (above 48 KiB needs the opt-in).
template <typename Kernel>
void allow_shared_bytes(Kernel kernel, std::size_t bytes) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)),
             "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

}  // namespace partune::kernels::cuda::detail
