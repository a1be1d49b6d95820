// CUDA FlashAttention backward (Dao et al., FlashAttention-2's loop order), in four steps
// on the caller's stream:
//   1. zero the fp32 dQ accumulator (cudaMemsetAsync on the workspace);
//   2. row_dot_kernel: D_i = rowsum(dO_i * O_i), one warp per query row;
//   3. flash_backward_kernel: one block owns a tile of kKeyTile keys of one head, keeps
//      dK_j and dV_j in registers, and walks the query tiles (causal: only those at or after
//      its first key). Per query tile, with Q_i (pre-scaled), dO_i, lse_i and D_i in shared
//      memory, it recomputes
//        P = exp(S*scale - lse)   dP = dO V^T   dS = P * (dP - D)
//      for the kQueryTile x kKeyTile block (kept in shared memory), then
//        dV_j += P^T dO_i    dK_j += dS^T Q_i * scale    dQ_i += dS K_j * scale
//      where dQ_i goes into the fp32 accumulator with atomicAdd (several key blocks add to
//      the same rows, in no fixed order: dq's last bits may vary from run to run);
//   4. dq_convert_kernel: dq = T(accumulator).
// No seq x seq matrix is stored in global memory: the scores exist one 32 x 32 block at a
// time, in shared memory.
#include "flash_attention_cuda_common.cuh"

namespace partune::kernels::cuda {
namespace {

using namespace detail;

constexpr int kBackwardWarps = 8;
constexpr int kKeyTile = kWarpSize;    // keys per block: one a lane when scoring
constexpr int kQueryTile = kWarpSize;  // queries per step
constexpr int kRowsPerWarp = kQueryTile / kBackwardWarps;  // score rows (or keys) per warp
constexpr int kBlockStride = kKeyTile + 1;  // row stride of the P and dS blocks (no conflicts)

// Shared memory of the main kernel, in floats, in this order.
template <int D>
struct BackwardTiles {
  float* k;     // [kKeyTile][D + 1]
  float* v;     // [kKeyTile][D + 1]
  float* q;     // [kQueryTile][D + 1], times scale
  float* dout;  // [kQueryTile][D + 1]
  float* p;     // [kQueryTile][kKeyTile + 1]
  float* ds;    // [kQueryTile][kKeyTile + 1]
  float* lse;   // [kQueryTile]
  float* d_row; // [kQueryTile]

  static constexpr std::size_t floats() {
    return std::size_t(2 * kKeyTile + 2 * kQueryTile) * tile_stride<D>() +
           2 * kQueryTile * kBlockStride + 2 * kQueryTile;
  }
  __device__ explicit BackwardTiles(float* base)
      : k(base),
        v(k + kKeyTile * tile_stride<D>()),
        q(v + kKeyTile * tile_stride<D>()),
        dout(q + kQueryTile * tile_stride<D>()),
        p(dout + kQueryTile * tile_stride<D>()),
        ds(p + kQueryTile * kBlockStride),
        lse(ds + kQueryTile * kBlockStride),
        d_row(lse + kQueryTile) {}
};

// Step 2: D_i = sum_d dO_id * O_id over all batch_heads * seq_len rows, one warp a row.
template <typename T, int D>
__global__ void row_dot_kernel(const T* __restrict__ out, const T* __restrict__ dout,
                               float* __restrict__ d_row, std::int64_t rows) {
  const std::int64_t row = std::int64_t(blockIdx.x) * kBackwardWarps + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // warp-uniform
  const int lane = threadIdx.x % kWarpSize;
  float sum = 0.f;
#pragma unroll
  for (int d = lane; d < D; d += kWarpSize)
    sum += to_float(out[row * D + d]) * to_float(dout[row * D + d]);
  sum = warp_sum(sum);
  if (lane == 0) d_row[row] = sum;
}

// Step 4: dq = T(accumulator), grid-stride.
template <typename T>
__global__ void dq_convert_kernel(const float* __restrict__ accumulator, T* __restrict__ dq,
                                  std::int64_t count) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride)
    dq[i] = from_float<T>(accumulator[i]);
}

// The P and dS blocks for the current query tile: lane = key, warp w scores rows w + 8r.
template <int D>
__device__ __forceinline__ void score_block(const BackwardTiles<D>& t, int first_query, int first_key,
                            int seq_len, bool causal) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int key = first_key + lane;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = warp + r * kBackwardWarps;
    const int query = first_query + i;
    const bool visible = query < seq_len && key < seq_len && !(causal && key > query);
    const float score = row_dot<D>(t.q + i * tile_stride<D>(), t.k + lane * tile_stride<D>());
    const float p = visible ? expf(score - t.lse[i]) : 0.f;  // score already times scale
    const float dp = row_dot<D>(t.dout + i * tile_stride<D>(), t.v + lane * tile_stride<D>());
    t.p[i * kBlockStride + lane] = p;
    t.ds[i * kBlockStride + lane] = p * (dp - t.d_row[i]);
  }
}

// dV_j += sum_i P_ij dO_i and dK_j += sum_i dS_ij (scale * Q_i) for the warp's keys
// j = w + 8r; lane holds dimensions lane + 32c.
template <int D>
__device__ __forceinline__ void accumulate_key_gradients(const BackwardTiles<D>& t,
                                         float (&dk)[kRowsPerWarp][D / kWarpSize],
                                         float (&dv)[kRowsPerWarp][D / kWarpSize]) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int j = warp + r * kBackwardWarps;
    for (int i = 0; i < kQueryTile; ++i) {
      const float p = t.p[i * kBlockStride + j];
      const float ds = t.ds[i * kBlockStride + j];
#pragma unroll
      for (int c = 0; c < D / kWarpSize; ++c) {
        const int d = lane + c * kWarpSize;
        dv[r][c] = fmaf(p, t.dout[i * tile_stride<D>() + d], dv[r][c]);
        dk[r][c] = fmaf(ds, t.q[i * tile_stride<D>() + d], dk[r][c]);
      }
    }
  }
}

// dQ_i += scale * sum_j dS_ij K_j into the fp32 accumulator, for the warp's rows i = w + 8r.
template <int D>
__device__ __forceinline__ void accumulate_query_gradients(const BackwardTiles<D>& t, float* dq_head,
                                           int first_query, int seq_len, float scale) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int i = warp + r * kBackwardWarps;
    const int query = first_query + i;
    if (query >= seq_len) continue;
#pragma unroll
    for (int c = 0; c < D / kWarpSize; ++c) {
      const int d = lane + c * kWarpSize;
      float sum = 0.f;
#pragma unroll 8
      for (int j = 0; j < kKeyTile; ++j)
        sum = fmaf(t.ds[i * kBlockStride + j], t.k[j * tile_stride<D>() + d], sum);
      atomicAdd(dq_head + std::int64_t(query) * D + d, sum * scale);
    }
  }
}

// Loads the query tile's Q (times scale), dO, lse and D; rows past seq_len are zero.
template <typename T, int D>
__device__ __forceinline__ void load_query_tile(const BackwardTiles<D>& t, const T* q_head, const T* dout_head,
                                const float* lse_head, const float* d_row_head,
                                int first_query, int seq_len, float scale) {
  load_tile<T, D>(t.q, q_head, first_query, kQueryTile, seq_len, scale);
  load_tile<T, D>(t.dout, dout_head, first_query, kQueryTile, seq_len, 1.f);
  for (int i = threadIdx.x; i < kQueryTile; i += blockDim.x) {
    const int query = first_query + i;
    t.lse[i] = query < seq_len ? lse_head[query] : 0.f;
    t.d_row[i] = query < seq_len ? d_row_head[query] : 0.f;
  }
}

struct BackwardArgs {
  const float* lse;
  const float* d_row;
  float* dq_accumulator;
  int seq_len;
  bool causal;
  float scale;
};

// Step 3. grid (batch_heads, key tiles); block kBackwardWarps warps; dynamic shared memory
// BackwardTiles<D>::floats() floats.
template <typename T, int D>
__global__ void __launch_bounds__(kBackwardWarps * kWarpSize)
flash_backward_kernel(const T* __restrict__ q, const T* __restrict__ k,
                      const T* __restrict__ v, const T* __restrict__ dout, T* __restrict__ dk,
                      T* __restrict__ dv, BackwardArgs a) {
  extern __shared__ float shared[];
  const BackwardTiles<D> t(shared);
  const int bh = blockIdx.x;
  const int first_key = blockIdx.y * kKeyTile;
  const std::int64_t base = head_offset(bh, a.seq_len, D);
  const std::int64_t row_base = head_offset(bh, a.seq_len, 1);
  load_tile<T, D>(t.k, k + base, first_key, kKeyTile, a.seq_len, 1.f);
  load_tile<T, D>(t.v, v + base, first_key, kKeyTile, a.seq_len, 1.f);

  float dk_acc[kRowsPerWarp][D / kWarpSize] = {};
  float dv_acc[kRowsPerWarp][D / kWarpSize] = {};
  // Causal: query tiles wholly before the first key see none of this block's keys.
  const int first_tile = a.causal ? first_key / kQueryTile * kQueryTile : 0;
  for (int first_query = first_tile; first_query < a.seq_len; first_query += kQueryTile) {
    __syncthreads();  // the previous tiles are consumed (and K, V are written)
    load_query_tile<T, D>(t, q + base, dout + base, a.lse + row_base, a.d_row + row_base,
                          first_query, a.seq_len, a.scale);
    __syncthreads();
    score_block<D>(t, first_query, first_key, a.seq_len, a.causal);
    __syncthreads();
    accumulate_key_gradients<D>(t, dk_acc, dv_acc);
    accumulate_query_gradients<D>(t, a.dq_accumulator + base, first_query, a.seq_len, a.scale);
  }

  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int key = first_key + warp + r * kBackwardWarps;
    if (key >= a.seq_len) continue;
#pragma unroll
    for (int c = 0; c < D / kWarpSize; ++c) {
      const std::int64_t at = base + std::int64_t(key) * D + lane + c * kWarpSize;
      dk[at] = from_float<T>(dk_acc[r][c]);
      dv[at] = from_float<T>(dv_acc[r][c]);
    }
  }
}

template <typename T, int D>
void launch_backward(const AttentionShape& s, const T* q, const T* k, const T* v, const T* out,
                     const T* dout, const float* lse, T* dq, T* dk, T* dv, float* workspace,
                     cudaStream_t stream) {
  const std::int64_t rows = std::int64_t(s.batch_heads) * s.seq_len;
  float* dq_accumulator = workspace;
  float* d_row = workspace + rows * D;
  check_cuda(cudaMemsetAsync(dq_accumulator, 0, sizeof(float) * rows * D, stream),
             "cudaMemsetAsync(dq accumulator)");

  const int threads = kBackwardWarps * kWarpSize;
  row_dot_kernel<T, D><<<unsigned((rows + kBackwardWarps - 1) / kBackwardWarps), threads, 0,
                         stream>>>(out, dout, d_row, rows);
  check_cuda(cudaGetLastError(), "backward row_dot kernel launch");

  const auto kernel = flash_backward_kernel<T, D>;
  const std::size_t shared_bytes = sizeof(float) * BackwardTiles<D>::floats();
  allow_shared_bytes(kernel, shared_bytes);
  const dim3 grid(s.batch_heads, ceil_div(s.seq_len, kKeyTile));
  kernel<<<grid, threads, shared_bytes, stream>>>(
      q, k, v, dout, dk, dv, BackwardArgs{lse, d_row, dq_accumulator, s.seq_len, s.causal, s.scale});
  check_cuda(cudaGetLastError(), "backward kernel launch");

  const std::int64_t count = rows * D;
  const std::int64_t blocks = std::min<std::int64_t>((count + threads - 1) / threads, 65535);
  dq_convert_kernel<T><<<unsigned(blocks), threads, 0, stream>>>(dq_accumulator, dq, count);
  check_cuda(cudaGetLastError(), "backward dq conversion kernel launch");
}

}  // namespace

std::size_t flash_attention_backward_workspace_bytes(const AttentionShape& shape) {
  validate_shape(shape);
  return sizeof(float) * std::size_t(shape.batch_heads) * std::size_t(shape.seq_len) *
         std::size_t(shape.head_dim + 1);
}

void flash_attention_backward(ElementType type, const AttentionShape& shape, const void* q,
                              const void* k, const void* v, const void* out,
                              const void* dout, const float* lse, void* dq, void* dk,
                              void* dv, float* workspace, void* stream) {
  validate_shape(shape);
  if (shape.batch_heads == 0 || shape.seq_len == 0) return;
  require(q && k && v && out && dout && lse && dq && dk && dv && workspace,
          "backward: null input, gradient or workspace pointer");
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  dispatch(type, shape.head_dim, [&](auto instance) {
    using T = typename decltype(instance)::Element;
    launch_backward<T, decltype(instance)::kHeadDim>(
        shape, static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
        static_cast<const T*>(out), static_cast<const T*>(dout), lse, static_cast<T*>(dq),
        static_cast<T*>(dk), static_cast<T*>(dv), workspace, cuda_stream);
  });
}

}  // namespace partune::kernels::cuda
