// CUDA FlashAttention forward (Dao et al., FlashAttention-2's loop order).
//
// One block owns a tile of kQueryTile query rows of one head and walks the keys in tiles
// of kKeyTile. Per key tile:
//   1. the block loads K_j and V_j into shared memory (fp32, ragged tail zero-filled);
//   2. for each of its query rows a warp computes the scaled scores s = q.k (one key per
//      lane; q was scaled by `scale` when its tile was loaded), masks hidden keys to -inf,
//      and folds the tile into the row's online softmax:
//        m' = max(m, max_j s_j);  p_j = exp(s_j - m');  c = exp(m - m')
//        l' = c * l + sum_j p_j;  acc' = c * acc + sum_j p_j v_j      (lanes split acc by dim)
// At the end out = acc / l and lse = m + log(l). Only the Q/K/V tiles live in shared
// memory; the scores exist one key tile at a time, in registers.
#include "flash_attention_cuda_common.cuh"

namespace partune::kernels::cuda {
namespace {

using namespace detail;

constexpr int kForwardWarps = 8;
constexpr int kRowsPerWarp = 8;                              // query rows each warp owns
constexpr int kQueryTile = kForwardWarps * kRowsPerWarp;     // 64 query rows per block
constexpr int kKeyTile = kWarpSize;                          // 32 keys per step, one a lane

template <int D>
constexpr std::size_t forward_shared_bytes() {
  return sizeof(float) * std::size_t(kQueryTile + 2 * kKeyTile) * tile_stride<D>();
}

// Online-softmax state of one query row; every lane of the row's warp holds m and l, and
// its own D/32 dimensions of the unnormalised output (dimension lane + 32 * c).
template <int D>
struct RowState {
  float max_score;  // m: largest scaled score seen so far (-inf before any)
  float sum_exp;    // l: sum of exp(score - m) over the keys seen
  float acc[D / kWarpSize];
};

// Folds one key tile into `row` (see the file comment). Called by a whole warp.
template <int D>
__device__ __forceinline__ void attend_key_tile(RowState<D>& row, const float* q_row,
                                                const float* k_tile, const float* v_tile,
                                                int query, int first_key, int seq_len,
                                                bool causal) {
  const int lane = threadIdx.x % kWarpSize;
  const int key = first_key + lane;
  const bool visible = key < seq_len && !(causal && key > query);
  const float dot = row_dot<D>(q_row, k_tile + lane * tile_stride<D>());
  const float score = visible ? dot : -INFINITY;

  const float new_max = fmaxf(row.max_score, warp_max(score));
  // Key 0 is visible to every query and lies in the first tile, so new_max is finite;
  // the guard keeps an all-hidden tile from producing exp(-inf - -inf) = NaN regardless.
  const float shift = new_max == -INFINITY ? 0.f : new_max;
  const float p = visible ? expf(score - shift) : 0.f;
  const float rescale = expf(row.max_score - shift);  // 0 while max_score is -inf
  row.sum_exp = row.sum_exp * rescale + warp_sum(p);
  row.max_score = new_max;

#pragma unroll
  for (int c = 0; c < D / kWarpSize; ++c) row.acc[c] *= rescale;
  // acc += sum_j p_j v_j: lane j's probability is broadcast, each lane adds its dims.
#pragma unroll 8
  for (int j = 0; j < kKeyTile; ++j) {
    const float p_j = __shfl_sync(kFullWarp, p, j);
    const float* v_row = v_tile + j * tile_stride<D>();
#pragma unroll
    for (int c = 0; c < D / kWarpSize; ++c) row.acc[c] = fmaf(p_j, v_row[lane + c * kWarpSize], row.acc[c]);
  }
}

// Writes one finished row: out = acc / l (rounded to T), lse = m + log(l).
template <typename T, int D>
__device__ __forceinline__ void write_row(const RowState<D>& row, T* out_row, float* lse_row) {
  const int lane = threadIdx.x % kWarpSize;
  const float inv_sum = 1.f / row.sum_exp;
#pragma unroll
  for (int c = 0; c < D / kWarpSize; ++c) out_row[lane + c * kWarpSize] = from_float<T>(row.acc[c] * inv_sum);
  if (lane == 0) *lse_row = row.max_score + logf(row.sum_exp);
}

// grid (batch_heads, query tiles); block kForwardWarps warps; dynamic shared memory
// forward_shared_bytes<D>(): the Q tile (pre-scaled), then K and V tiles.
template <typename T, int D>
__global__ void __launch_bounds__(kForwardWarps * kWarpSize)
flash_forward_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                     T* __restrict__ out, float* __restrict__ lse, int seq_len, bool causal,
                     float scale) {
  extern __shared__ float shared[];
  float* q_tile = shared;
  float* k_tile = q_tile + kQueryTile * tile_stride<D>();
  float* v_tile = k_tile + kKeyTile * tile_stride<D>();

  const int bh = blockIdx.x;
  const int first_query = blockIdx.y * kQueryTile;
  const int warp = threadIdx.x / kWarpSize;
  const std::int64_t base = head_offset(bh, seq_len, D);
  load_tile<T, D>(q_tile, q + base, first_query, kQueryTile, seq_len, scale);

  RowState<D> rows[kRowsPerWarp];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    rows[r].max_score = -INFINITY;
    rows[r].sum_exp = 0.f;
#pragma unroll
    for (int c = 0; c < D / kWarpSize; ++c) rows[r].acc[c] = 0.f;
  }

  // Causal: keys past the tile's last query are hidden from all its rows.
  const int key_end = causal ? min(seq_len, first_query + kQueryTile) : seq_len;
  for (int first_key = 0; first_key < key_end; first_key += kKeyTile) {
    __syncthreads();  // the previous K/V tiles are consumed (and the Q tile is written)
    load_tile<T, D>(k_tile, k + base, first_key, kKeyTile, seq_len, 1.f);
    load_tile<T, D>(v_tile, v + base, first_key, kKeyTile, seq_len, 1.f);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int local = warp * kRowsPerWarp + r;
      const int query = first_query + local;
      // Warp-uniform skip: a row past the end, or a tile wholly after a causal query.
      if (query >= seq_len || (causal && first_key > query)) continue;
      attend_key_tile<D>(rows[r], q_tile + local * tile_stride<D>(), k_tile, v_tile, query,
                         first_key, seq_len, causal);
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int query = first_query + warp * kRowsPerWarp + r;
    if (query >= seq_len) continue;
    write_row<T, D>(rows[r], out + base + std::int64_t(query) * D,
                    lse + head_offset(bh, seq_len, 1) + query);
  }
}

template <typename T, int D>
void launch_forward(const AttentionShape& s, const void* q, const void* k, const void* v,
                    void* out, float* lse, cudaStream_t stream) {
  const auto kernel = flash_forward_kernel<T, D>;
  const std::size_t shared_bytes = forward_shared_bytes<D>();
  allow_shared_bytes(kernel, shared_bytes);
  const dim3 grid(s.batch_heads, ceil_div(s.seq_len, kQueryTile));
  kernel<<<grid, kForwardWarps * kWarpSize, shared_bytes, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<T*>(out), lse, s.seq_len, s.causal, s.scale);
  check_cuda(cudaGetLastError(), "forward kernel launch");
}

}  // namespace

void flash_attention_forward(ElementType type, const AttentionShape& shape, const void* q,
                             const void* k, const void* v, void* out, float* lse,
                             void* stream) {
  validate_shape(shape);
  if (shape.batch_heads == 0 || shape.seq_len == 0) return;
  detail::require(q && k && v && out && lse, "forward: null q, k, v, out or lse");
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  dispatch(type, shape.head_dim, [&](auto instance) {
    using Tag = decltype(instance);
    launch_forward<typename Tag::Element, Tag::kHeadDim>(shape, q, k, v, out, lse, cuda_stream);
  });
}

}  // namespace partune::kernels::cuda
