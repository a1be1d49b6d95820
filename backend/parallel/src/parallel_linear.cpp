// ColumnParallelLinear / RowParallelLinear (parallel_linear.hpp). Parameters are created
// empty here; GPTModel initialises every parameter from its seed.
#include "partune/backend/parallel_linear.hpp"

#include "partune/backend/fp8_linear.hpp"

namespace partune::backend {

namespace {

int degree_of(const TensorParallel& tp) { return tp ? tp->degree() : 1; }
int rank_of(const TensorParallel& tp) { return tp ? tp->rank() : 0; }

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(std::int64_t in, std::int64_t out, bool with_bias,
                                                   TensorParallel tp_, Conjugate entry_, bool beside_gemm_)
    : in_features(in), out_features(out), tp(std::move(tp_)), entry(entry_), beside_gemm(beside_gemm_) {
  const Slice part = tensor_slice(out, degree_of(tp), rank_of(tp), "out_features");
  weight = register_parameter("weight", torch::empty({part.size, in}));
  if (with_bias) bias = register_parameter("bias", torch::empty({part.size}));
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  // Y_i = X A_i + b_i; f (or sp_gather's reduce-scatter) makes the backward sum dX over
  // the ranks (each rank's X A_i contributes only its columns' share of dX). The output
  // stays split.
  return enter_region(x, weight, bias, entry, tp, beside_gemm);
}

RowParallelLinearImpl::RowParallelLinearImpl(std::int64_t in, std::int64_t out, bool with_bias, TensorParallel tp_,
                                             Conjugate exit_, bool beside_gemm_)
    : in_features(in), out_features(out), tp(std::move(tp_)), exit(exit_), beside_gemm(beside_gemm_) {
  const Slice part = tensor_slice(in, degree_of(tp), rank_of(tp), "in_features");
  weight = register_parameter("weight", torch::empty({out, part.size}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out}));
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  // Y = sum_i X_i A_i + b: g (or sp_scatter) sums the partial products; the bias is
  // added once, after the sum, so it is not counted t times (its gradient is then the
  // same on every rank, or with sp_scatter that of the rank's sequence shard).
  const torch::Tensor y = project_out_of_region(x, weight, exit, tp, beside_gemm);
  return bias.defined() ? y + bias : y;
}

}  // namespace partune::backend
