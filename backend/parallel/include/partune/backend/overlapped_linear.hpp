#pragma once
// Tensor-parallel communication overlap (parallel.tp_comm_overlap; Megatron-core's
// --tp-comm-overlap, Transformer Engine's userbuffers): the sequence-parallel collectives at
// the edges of a tensor-parallel region run in chunks beside the GEMM they feed or follow,
// instead of blocking before or after it. A chunk is one rank's sequence shard (s/t
// positions of dimension 1 of [batch, seq, features]); the exchanges are the rings of
// ring_exchange.hpp (userbuffers' ring exchange), one per collective of the layer plan.
//
//   chunked_gather_linear   sp_gather + column-parallel GEMM: Y = all_gather(X) W^T. The
//       GEMM of the shard at hand runs while the next shard travels, each chunk's output
//       written at its own positions, so Y is in token order. Backward: dX = dY W computed
//       per owner's rows on the reduce-scatter ring, then the shards re-gathered on the
//       all-gather ring beside dW's chunks, dW = sum over chunks dY_c^T X_c (or, under a
//       split backward, the re-gathered X handed to the weight-gradient store).
//   chunked_linear_scatter  row-parallel GEMM + sp_scatter: this rank's shard of
//       sum over ranks X_i W_i^T, the GEMM computed per owner's rows (X's rows of rank c)
//       on the reduce-scatter ring. Backward: the gradient's shards on the all-gather ring,
//       each chunk's dX rows and dW = sum dY_c^T X_c computed as it arrives.
// Each is exact (the same sums as the blocking conjugates, in another order) and counts,
// per pass, the collectives the blocking conjugates count: forward one all-gather (resp.
// reduce-scatter); backward a reduce-scatter and a re-gather (resp. an all-gather).
// fp32 / bf16 / fp16 GEMMs (not fp8: the trainer refuses fp8 with tp_comm_overlap). `tp`
// has degree > 1; the bias, when there is one, is added by the caller.
#include <torch/torch.h>

#include "partune/backend/tensor_parallel.hpp"

namespace partune::backend {

// shard [b, s/t, in] (this rank's sequence shard), weight W_i [out/t, in] -> [b, s, out/t].
torch::Tensor chunked_gather_linear(const torch::Tensor& shard, const torch::Tensor& weight, const TensorParallel& tp);

// x [b, s, in/t] (this rank's input columns), weight W_i [out, in/t] -> [b, s/t, out], this
// rank's sequence shard of the sum over the group.
torch::Tensor chunked_linear_scatter(const torch::Tensor& x, const torch::Tensor& weight, const TensorParallel& tp);

}  // namespace partune::backend
