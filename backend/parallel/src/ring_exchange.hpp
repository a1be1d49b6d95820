#pragma once
// The chunked collectives of tensor-parallel communication overlap (tp_comm_overlap), as
// Transformer Engine's userbuffers run them beside a GEMM: the sequence-parallel all-gather
// as a ring exchange of the ranks' sequence shards, and the reduce-scatter as a ring of
// partial sums, one chunk (a rank's sequence shard) per step. Each step's transfer is
// started before the caller's work on the chunk already present and completed after it,
// so the transfer runs beside that work (the GEMM of one chunk). Point-to-point over the
// tensor group: send to tensor rank r + 1, receive from r - 1 (mod t).
//
// Every rank of the group calls the same function in the same order (the layers run in
// program order on every tensor rank). Each call is counted in the group's tally as one
// collective of its kind (the program's instruction stands for it), with the seconds the
// caller waited on its transfers (TensorParallelGroup::count_beside_gemm).
#include <functional>

#include <torch/torch.h>

#include "partune/backend/tensor_parallel.hpp"

namespace partune::backend {

// The all-gather ring (userbuffers' AG ring exchange): calls on_chunk(source, shard) once
// for every rank's `shard` (all the same shape), this rank's first, then that of rank
// r - 1, r - 2, ...; while on_chunk runs on one, the next is on its way. `group` has
// degree > 1.
void ring_all_gather(TensorParallelGroup& group, const torch::Tensor& shard,
                     const std::function<void(int source, const torch::Tensor& chunk)>& on_chunk);

// The reduce-scatter ring (userbuffers' pipelined GEMM + reduce-scatter): this rank's part
// of the sum over the group of every rank's partial(owner), where partial(owner) is this
// rank's contribution to the rows tensor rank `owner` keeps (the same shape for every
// owner). The partial sum of owner c starts on rank c + 1 and gains each rank's partial
// on its way round to c; partial(c) of the next owner is computed while the last hop is
// on its way. Called for owners r - 1, r - 2, ..., r, in that order. `group` has degree > 1.
torch::Tensor ring_reduce_scatter(TensorParallelGroup& group, const std::function<torch::Tensor(int owner)>& partial);

}  // namespace partune::backend
