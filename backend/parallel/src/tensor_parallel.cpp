// The tensor-parallel group and Megatron's f / g operators (tensor_parallel.hpp).
#include "partune/backend/tensor_parallel.hpp"

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "partune/costmodel/collective.hpp"

namespace partune::backend {

TensorParallelGroup::TensorParallelGroup(CommBackendPtr group, int degree, int rank)
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

TensorCalls& TensorCalls::operator+=(const TensorCalls& o) {
  for (int k = 0; k < kKinds; ++k) {
    calls[k] += o.calls[k];
    seconds[k] += o.seconds[k];
    waited_beside_gemm[k] += o.waited_beside_gemm[k];
    beside_gemm_calls[k] += o.beside_gemm_calls[k];
  }
  return *this;
}

namespace {

constexpr int kAllReduce = static_cast<int>(CollectiveKind::all_reduce);
constexpr int kAllGather = static_cast<int>(CollectiveKind::all_gather);
constexpr int kReduceScatter = static_cast<int>(CollectiveKind::reduce_scatter);
static_assert(kAllReduce < TensorCalls::kKinds && kAllGather < TensorCalls::kKinds &&
              kReduceScatter < TensorCalls::kKinds);

double since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void all_reduce(const CommBackendPtr& group, torch::Tensor& t, c10d::ReduceOp op) {
  // Gloo reduces dense contiguous buffers in place.
  if (!t.is_contiguous()) t = t.contiguous();
  std::vector<torch::Tensor> tensors{t};
  c10d::AllreduceOptions options;
  options.reduceOp = op;
  group->allreduce(tensors, options)->wait();
}

}  // namespace

void TensorParallelGroup::all_reduce_sum(torch::Tensor& t) {
  if (degree_ == 1) return;
  const auto start = std::chrono::steady_clock::now();
  all_reduce(group_, t, c10d::ReduceOp::SUM);
  tally_.seconds[kAllReduce] += since(start);
  ++tally_.calls[kAllReduce];
}

void TensorParallelGroup::all_reduce_max(torch::Tensor& t) {
  if (degree_ == 1) return;
  const auto start = std::chrono::steady_clock::now();
  all_reduce(group_, t, c10d::ReduceOp::MAX);
  tally_.seconds[kAllReduce] += since(start);
  ++tally_.calls[kAllReduce];
}

torch::Tensor TensorParallelGroup::all_gather(const torch::Tensor& shard, int dim) {
  if (degree_ == 1) return shard;
  const auto start = std::chrono::steady_clock::now();
  std::vector<torch::Tensor> input{shard.contiguous()};
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < degree_; ++r) outputs[0].push_back(torch::empty_like(input[0]));
  group_->allgather(outputs, input)->wait();
  torch::Tensor whole = torch::cat(outputs[0], dim);
  tally_.seconds[kAllGather] += since(start);
  ++tally_.calls[kAllGather];
  return whole;
}

torch::Tensor TensorParallelGroup::reduce_scatter_sum(const torch::Tensor& t, int dim) {
  if (degree_ == 1) return t;
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor sum = t.clone(at::MemoryFormat::Contiguous);  // the input is not modified
  all_reduce(group_, sum, c10d::ReduceOp::SUM);
  const Slice part = tensor_slice(sum.size(dim), degree_, rank_, "the sequence");
  torch::Tensor mine = sum.narrow(dim, part.begin, part.size).contiguous();  // the whole sum is freed
  tally_.seconds[kReduceScatter] += since(start);
  ++tally_.calls[kReduceScatter];
  return mine;
}

void TensorParallelGroup::count_beside_gemm(CollectiveKind kind, double waited_seconds) {
  const int k = static_cast<int>(kind);
  ++tally_.calls[k];
  tally_.seconds[k] += waited_seconds;
  tally_.waited_beside_gemm[k] += waited_seconds;
  ++tally_.beside_gemm_calls[k];
}

void TensorParallelGroup::sum_gradients(torch::Tensor& flat) {
  if (degree_ == 1) return;
  const auto start = std::chrono::steady_clock::now();
  all_reduce(group_, flat, c10d::ReduceOp::SUM);
  gradient_seconds_ += since(start);
}

double TensorParallelGroup::take_gradient_seconds() {
  const double s = gradient_seconds_;
  gradient_seconds_ = 0;
  return s;
}

TensorCalls TensorParallelGroup::take_tally() { return tally_.take(); }

torch::Tensor all_to_all_equal_blocks(const CommBackendPtr& group, const torch::Tensor& t) {
  torch::Tensor in = t.contiguous();
  torch::Tensor out = torch::empty_like(in);
  std::vector<std::int64_t> equal;  // empty split sizes: equal blocks
  group->alltoall_base(out, in, equal, equal)->wait();
  return out;
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
