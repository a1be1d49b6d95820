#pragma once
// Megatron-LM's tensor-parallel linear layers (Shoeybi et al. 2019, section 3), written
// so that tensor parallelism can be added without changing their callers. Today they take
// `tensor_degree` = 1 and no process group: each is an ordinary linear layer.
//
// Both compute Y = X A + b with X [..., in], A [in, out], b [out]. Like torch::nn::Linear
// (and Megatron), the weight is stored transposed, W = A^T with shape [out, in], so that
// Y = X W^T + b.
//
// ColumnParallelLinear splits A by columns over the t ranks of the tensor group:
//   A = [A_1, ..., A_t],  A_i [in, out/t],  b = [b_1, ..., b_t]
//   Y_i = X A_i + b_i     (rank i holds W_i = A_i^T [out/t, in] and b_i)
// The input X is the same on every rank (its backward all-reduces dX over the group:
// Megatron's "f" operator); the output stays split (Y_i, gather_output = false) when a
// RowParallelLinear follows, as in attention (QKV -> heads) and the MLP (fc1 -> GeLU).
//
// RowParallelLinear splits A by rows, so it takes an input split by columns:
//   A = [A_1; ...; A_t],  A_i [in/t, out],  X = [X_1, ..., X_t]
//   Y = sum_i X_i A_i + b (rank i computes X_i A_i; an all-reduce over the group sums
//   them: Megatron's "g" operator; b is added once, after the sum)
//
// With tensor_degree = 1 both reduce to Y = X A + b and no communication happens.
// The collectives (the "f"/"g" all-reduces on CommGroup::tensor) are where the program's
// tensor all-reduce instructions will be executed once a process group is passed in.
#include <torch/torch.h>

namespace partune::backend {

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument unless tensor_degree == 1 (the only degree built yet).
  ColumnParallelLinearImpl(std::int64_t in_features, std::int64_t out_features, bool bias = true,
                           int tensor_degree = 1);
  torch::Tensor forward(const torch::Tensor& x);

  std::int64_t in_features, out_features;  // of the whole (unsplit) layer
  int tensor_degree;
  torch::Tensor weight;  // W_i = A_i^T: [out_features / tensor_degree, in_features]
  torch::Tensor bias;    // b_i: [out_features / tensor_degree], undefined without bias
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(std::int64_t in_features, std::int64_t out_features, bool bias = true,
                        int tensor_degree = 1);
  torch::Tensor forward(const torch::Tensor& x);

  std::int64_t in_features, out_features;
  int tensor_degree;
  torch::Tensor weight;  // W_i = A_i^T: [out_features, in_features / tensor_degree]
  torch::Tensor bias;    // b: [out_features] (whole, added after the reduction)
};
TORCH_MODULE(RowParallelLinear);

}  // namespace partune::backend
