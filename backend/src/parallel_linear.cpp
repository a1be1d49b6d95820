// ColumnParallelLinear / RowParallelLinear (parallel_linear.hpp). Parameters are created
// empty here; GPTModel initialises every parameter from its seed.
#include "partune/backend/parallel_linear.hpp"

#include <stdexcept>
#include <string>

namespace partune::backend {

namespace {

void require_degree_one(const char* what, int tensor_degree) {
  if (tensor_degree != 1)
    throw std::invalid_argument(std::string(what) + ": tensor_degree " + std::to_string(tensor_degree) +
                                " needs a tensor-parallel process group, which is not built yet (only 1)");
}

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(std::int64_t in, std::int64_t out, bool with_bias, int degree)
    : in_features(in), out_features(out), tensor_degree(degree) {
  require_degree_one("ColumnParallelLinear", degree);
  weight = register_parameter("weight", torch::empty({out / degree, in}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out / degree}));
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  // Y_i = X A_i + b_i. With tensor_degree > 1: X goes through "f" (identity forward,
  // all-reduce of dX backward) first; the output stays split.
  return torch::nn::functional::linear(x, weight, bias);
}

RowParallelLinearImpl::RowParallelLinearImpl(std::int64_t in, std::int64_t out, bool with_bias, int degree)
    : in_features(in), out_features(out), tensor_degree(degree) {
  require_degree_one("RowParallelLinear", degree);
  weight = register_parameter("weight", torch::empty({out, in / degree}));
  if (with_bias) bias = register_parameter("bias", torch::empty({out}));
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  // Y = sum_i X_i A_i + b. With tensor_degree > 1: the partial X_i A_i goes through "g"
  // (all-reduce forward, identity backward) before the bias is added.
  torch::Tensor y = torch::matmul(x, weight.t());
  return bias.defined() ? y + bias : y;
}

}  // namespace partune::backend
