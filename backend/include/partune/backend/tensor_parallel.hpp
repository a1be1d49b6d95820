#pragma once
// The tensor-parallel group of one rank and Megatron's two conjugate operators on it
// (Shoeybi et al. 2019, section 3):
//   f = copy_to_tensor_region:     identity forward, all-reduce (sum) of the gradient backward
//   g = reduce_from_tensor_region: all-reduce (sum) forward, identity backward
// A column-parallel linear layer starts with f; a row-parallel one ends with g.
//
// The collectives run inside the layers (where Megatron runs them). The group times each
// one, so the executor can show their time as the program's tensor `all_reduce`
// instructions that follow each compute instruction (docs/architecture.md, section 8).
#include <memory>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

namespace partune::backend {

class TensorParallelGroup {
 public:
  // degree 1: no process group, every collective is the identity.
  TensorParallelGroup() = default;
  // `group` holds exactly the `degree` ranks of this rank's tensor-parallel group, in
  // tensor-coordinate order (`rank` = this rank's tensor coordinate).
  TensorParallelGroup(c10::intrusive_ptr<c10d::ProcessGroup> group, int degree, int rank);

  int degree() const { return degree_; }
  int rank() const { return rank_; }

  // In place, blocking, timed. Identity at degree 1.
  void all_reduce_sum(torch::Tensor& t);
  void all_reduce_max(torch::Tensor& t);

  // Seconds spent in this group's collectives (and how many ran) since the last take_*().
  double take_seconds();
  int take_calls();

 private:
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
  int degree_ = 1, rank_ = 0;
  double seconds_ = 0;
  int calls_ = 0;
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
