#pragma once
// The tensor-parallel group of one rank and Megatron's two conjugate operators on it
// (Shoeybi et al. 2019, section 3):
//   f = copy_to_tensor_region:     identity forward, all-reduce (sum) of the gradient backward
//   g = reduce_from_tensor_region: all-reduce (sum) forward, identity backward
// A column-parallel linear layer starts with f; a row-parallel one ends with g.
//
// With sequence parallelism (Korthikanti et al. 2022) the activations between regions are
// split along the sequence (dimension 1 of [batch, seq, hidden]) and the group also
// all-gathers and reduce-scatters along it (conjugates.hpp has the operators).
//
// The collectives run inside the layers (where Megatron runs them). The group times and
// counts each one, so the executor can show their time and number as the program's
// tensor instructions that follow each compute instruction (docs/backend.md §8.4).
#include <array>
#include <memory>

#include <torch/torch.h>
#include "partune/backend/torch_compat.hpp"
#include "partune/costmodel/collective.hpp"

namespace partune::backend {

// The group's collective calls and their seconds, by CollectiveKind (all-reduce,
// all-gather, reduce-scatter; a reduce-scatter is counted as one even though Gloo runs
// it as an all-reduce; and a mixture of experts' all-to-alls, expert_parallel.hpp).
struct TensorCalls {
  static constexpr int kKinds = 5;
  std::array<int, kKinds> calls{};
  std::array<double, kKinds> seconds{};
  // Of `seconds`, those of collectives run in chunks beside their GEMM (tp_comm_overlap,
  // overlapped_linear.hpp): the time the GEMM's pipeline waited on a chunk, which the
  // timeline shows at the program's wait on the instruction rather than in the compute.
  std::array<double, kKinds> waited_beside_gemm{};
  std::array<int, kKinds> beside_gemm_calls{};  // of `calls`, those run beside a GEMM
  int total() const {
    int n = 0;
    for (int c : calls) n += c;
    return n;
  }
  double total_seconds() const {
    double s = 0;
    for (double x : seconds) s += x;
    return s;
  }
  TensorCalls& operator+=(const TensorCalls& o);
  // The tally so far, leaving it empty.
  TensorCalls take() {
    const TensorCalls t = *this;
    *this = TensorCalls{};
    return t;
  }
};

// An all-to-all of equal blocks along dimension 0 over `group` (blocking, untimed): block
// i goes to rank i, block j of the result came from rank j. The expert and context
// groups' exchanges.
torch::Tensor all_to_all_equal_blocks(const CommBackendPtr& group, const torch::Tensor& t);

class TensorParallelGroup {
 public:
  // degree 1: no process group, every collective is the identity.
  TensorParallelGroup() = default;
  // `group` holds exactly the `degree` ranks of this rank's tensor-parallel group, in
  // tensor-coordinate order (`rank` = this rank's tensor coordinate).
  TensorParallelGroup(CommBackendPtr group, int degree, int rank);

  int degree() const { return degree_; }
  int rank() const { return rank_; }

  // In place, blocking, timed. Identity at degree 1.
  void all_reduce_sum(torch::Tensor& t);
  void all_reduce_max(torch::Tensor& t);
  // The rank-ordered concatenation of every rank's `shard` along `dim` (one call).
  torch::Tensor all_gather(const torch::Tensor& shard, int dim);
  // The sum over the group of `t`, of which this rank keeps its part along `dim` (one
  // call: Gloo in LibTorch 1.13 has no reduce-scatter, so an all-reduce and a slice).
  torch::Tensor reduce_scatter_sum(const torch::Tensor& t, int dim);
  // One collective of `kind` run in chunks beside its GEMM (overlapped_linear.hpp), of
  // which the caller waited `waited_seconds` (the rest hid under the GEMM's chunks).
  void count_beside_gemm(CollectiveKind kind, double waited_seconds);
  // The c10d group (null at degree 1), for the chunked exchanges of ring_exchange.hpp.
  const CommBackendPtr& process_group() const { return group_; }
  // Sums, in place, the gradients of parameters replicated over the group that each rank
  // computed from its sequence shard (once per step, outside the layers: not counted in
  // take_calls, timed in take_gradient_seconds).
  void sum_gradients(torch::Tensor& flat);

  // This group's collectives (how many ran, and their seconds) since the last take_*().
  TensorCalls take_tally();
  double take_seconds() { return take_tally().total_seconds(); }
  int take_calls() { return take_tally().total(); }
  double take_gradient_seconds();

 private:
  CommBackendPtr group_;
  int degree_ = 1, rank_ = 0;
  TensorCalls tally_;
  double gradient_seconds_ = 0;
};

using TensorParallel = std::shared_ptr<TensorParallelGroup>;  // null = degree 1

// f: identity forward; backward all-reduces (sums) the gradient over the group.
torch::Tensor copy_to_tensor_region(const torch::Tensor& x, const TensorParallel& tp);
// g: forward all-reduces (sums) x over the group; identity backward.
torch::Tensor reduce_from_tensor_region(const torch::Tensor& x, const TensorParallel& tp);

// The slice [rank * n / degree, (rank + 1) * n / degree) of a size-n dimension; throws
// std::invalid_argument naming `what` when degree does not divide n.
struct Slice {
  std::int64_t begin = 0, size = 0;
};
Slice tensor_slice(std::int64_t n, int degree, int rank, const char* what);

}  // namespace partune::backend
