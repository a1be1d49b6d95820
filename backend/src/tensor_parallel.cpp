// The tensor-parallel group and Megatron's f / g operators (tensor_parallel.hpp).
#include "partune/backend/tensor_parallel.hpp"

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace partune::backend {

TensorParallelGroup::TensorParallelGroup(c10::intrusive_ptr<c10d::ProcessGroup> group, int degree, int rank)
    : group_(std::move(group)), degree_(degree), rank_(rank) {
  if (degree < 1) throw std::invalid_argument("TensorParallelGroup: degree " + std::to_string(degree) + " < 1");
  if (rank < 0 || rank >= degree)
    throw std::invalid_argument("TensorParallelGroup: rank " + std::to_string(rank) + " outside degree " +
                                std::to_string(degree));
  if (degree > 1 && !group_) throw std::invalid_argument("TensorParallelGroup: degree > 1 needs a process group");
  // The group's own numbering must be the tensor coordinate: the vocabulary and head
  // slices a rank holds follow `rank`, the collectives follow the group's ranks.
  if (group_ && (group_->getSize() != degree || group_->getRank() != rank))
    throw std::invalid_argument("TensorParallelGroup: the process group is rank " + std::to_string(group_->getRank()) +
                                " of " + std::to_string(group_->getSize()) + ", not rank " + std::to_string(rank) +
                                " of " + std::to_string(degree));
}

namespace {

void all_reduce(const c10::intrusive_ptr<c10d::ProcessGroup>& group, torch::Tensor& t, c10d::ReduceOp op,
                double& seconds, int& calls) {
  // Gloo reduces dense contiguous buffers in place.
  if (!t.is_contiguous()) t = t.contiguous();
  const auto start = std::chrono::steady_clock::now();
  std::vector<torch::Tensor> tensors{t};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  group->allreduce(tensors, options)->wait();
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ++calls;
}

}  // namespace

void TensorParallelGroup::all_reduce_sum(torch::Tensor& t) {
  if (degree_ > 1) all_reduce(group_, t, c10d::ReduceOp::SUM, seconds_, calls_);
}

void TensorParallelGroup::all_reduce_max(torch::Tensor& t) {
  if (degree_ > 1) all_reduce(group_, t, c10d::ReduceOp::MAX, seconds_, calls_);
}

double TensorParallelGroup::take_seconds() {
  const double s = seconds_;
  seconds_ = 0;
  return s;
}

int TensorParallelGroup::take_calls() {
  const int n = calls_;
  calls_ = 0;
  return n;
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels to backward as the raw address of the TensorParallelGroup in
// ctx->saved_data (an IValue cannot hold a std::shared_ptr). This is safe because the
// object is owned by the modules that call f / g (the parallel linears, the model's
// ModelShard), which outlive every graph built from their forward: backward runs before
// the model is destroyed.
std::int64_t address_of(TensorParallelGroup* group) { return reinterpret_cast<std::int64_t>(group); }
TensorParallelGroup& group_at(AutogradContext* ctx) {
  return *reinterpret_cast<TensorParallelGroup*>(ctx->saved_data["group"].toInt());
}

// f: identity forward, all-reduce (sum) of the gradient backward.
struct CopyToTensorRegion : public torch::autograd::Function<CopyToTensorRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t group) {
    ctx->saved_data["group"] = group;
    return x;  // autograd returns an input as a fresh view carrying this node
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    // A copy: the incoming gradient buffer may be shared with another branch (a residual
    // sum hands the same tensor to both of its inputs), and the all-reduce is in place.
    torch::Tensor grad = grad_outputs[0].clone(at::MemoryFormat::Contiguous);
    group_at(ctx).all_reduce_sum(grad);
    return {grad, torch::Tensor()};
  }
};

// g: all-reduce (sum) forward, identity backward.
struct ReduceFromTensorRegion : public torch::autograd::Function<ReduceFromTensorRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t group) {
    torch::Tensor sum = x.clone(at::MemoryFormat::Contiguous);  // the input is not modified
    reinterpret_cast<TensorParallelGroup*>(group)->all_reduce_sum(sum);
    return sum;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    return {grad_outputs[0], torch::Tensor()};
  }
};

bool parallel(const TensorParallel& tp) { return tp && tp->degree() > 1; }

}  // namespace

torch::Tensor copy_to_tensor_region(const torch::Tensor& x, const TensorParallel& tp) {
  if (!parallel(tp)) return x;
  return CopyToTensorRegion::apply(x, address_of(tp.get()));
}

torch::Tensor reduce_from_tensor_region(const torch::Tensor& x, const TensorParallel& tp) {
  if (!parallel(tp)) return x;
  return ReduceFromTensorRegion::apply(x, address_of(tp.get()));
}

Slice tensor_slice(std::int64_t n, int degree, int rank, const char* what) {
  if (degree < 1 || n % degree != 0)
    throw std::invalid_argument("tensor degree " + std::to_string(degree) + " does not divide " + what + " " +
                                std::to_string(n));
  const std::int64_t size = n / degree;
  return {rank * size, size};
}

}  // namespace partune::backend
