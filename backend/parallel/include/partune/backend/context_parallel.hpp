#pragma once
// Context parallelism over a context group (the layer plan's context_comm ops; Megatron-
// core's cp_comm_type): every sequence split over `degree` ranks, rank r holding the two
// chunks r and 2 degree - 1 - r of length s / (2 degree) (causal load balancing), in that
// order, at their global positions (positions()). Around each attention core:
//   p2p / allgather: the keys and values of every rank are gathered (p2p: passed around a
//     ring in degree - 1 sends and receives; allgather: one all-gather), the core runs
//     the rank's queries against all of them under the causal mask of the global
//     positions, and only the rank's own keys and values are kept: backward gathers them
//     again, recomputes the probabilities and returns each rank's key and value gradients
//     (ring: degree - 1 steps of partial sums; allgather: a reduction). One all-gather
//     forward, one all-gather and one reduce-scatter backward, as the program says.
//   a2a: one all-to-all turns the rank's queries, keys and values of all its heads into a
//     1 / degree share of its heads over the whole sequence (in rank order), the core
//     runs there, and one all-to-all brings the context back; the backward runs the
//     inverse exchanges.
// The calls are timed and counted (TensorCalls) for the executor's booking, as the expert
// group's are. No FlashAttention here (its kernels take the causal mask of one aligned
// sequence): the backend refuses the two together.
#include <cstdint>
#include <memory>

#include <torch/torch.h>
#include "partune/backend/torch_compat.hpp"

#include "partune/backend/tensor_parallel.hpp"
#include "partune/costmodel/job.hpp"

namespace partune::backend {

class ContextParallelGroup {
 public:
  ContextParallelGroup() = default;  // degree 1
  // `group` holds the `degree` ranks of this rank's context group in data-axis order
  // (`rank`: this rank's place in it).
  ContextParallelGroup(CommBackendPtr group, int degree, int rank, ContextComm comm);
  int degree() const { return degree_; }
  int rank() const { return rank_; }
  ContextComm comm() const { return comm_; }

  // The global positions of this rank's s / degree tokens of a sequence of `seq_len`
  // (two chunks, in order), int64; of every rank's, in rank order (all_positions).
  torch::Tensor positions(std::int64_t seq_len) const;
  torch::Tensor all_positions(std::int64_t seq_len) const;

  // Every rank's `t` concatenated along `dim` in rank order (one counted all-gather).
  torch::Tensor gather(const torch::Tensor& t, int dim);
  // The sum over the group of `t`, of which this rank keeps block `rank` along `dim` (one
  // counted reduce-scatter).
  torch::Tensor reduce_scatter(const torch::Tensor& t, int dim);
  // All-to-all of equal blocks along dimension 0 (one counted all-to-all).
  torch::Tensor exchange(const torch::Tensor& t);
  TensorCalls take_tally();

 private:
  void count(int kind, double seconds);
  torch::Tensor rank_positions(std::int64_t seq_len, int rank) const;
  CommBackendPtr group_;
  int degree_ = 1, rank_ = 0;
  ContextComm comm_ = ContextComm::p2p;
  TensorCalls tally_;
};
using ContextParallel = std::shared_ptr<ContextParallelGroup>;  // null = degree 1

// The causal attention core of a context rank: q [b, heads, s / cp, d] (the rank's
// tokens), k, v [b, kv_heads, s / cp, d] with heads a multiple of kv_heads (each key/value
// head serving heads / kv_heads consecutive query heads) -> [b, heads, s / cp, d], by the
// group's exchange. `seq_len` is the whole sequence's.
torch::Tensor context_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                std::int64_t seq_len, const ContextParallel& cp);

}  // namespace partune::backend
