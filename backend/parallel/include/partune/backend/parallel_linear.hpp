#pragma once
// Megatron-LM's tensor-parallel linear layers (Shoeybi et al. 2019, section 3) over the
// rank's TensorParallel group (tensor_parallel.hpp); a null group is degree 1, where each
// is an ordinary linear layer.
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
// With degree 1 both reduce to Y = X A + b and no communication happens. The region
// edges are the layer plan's conjugates (conjugates.hpp): the column-parallel layer
// enters with `entry` (f, or sp_gather under sequence parallelism: X is then this rank's
// sequence shard and Y_i covers the whole sequence), the row-parallel one leaves with
// `exit` (g, or sp_scatter: Y is then this rank's sequence shard, the bias added to it).
// The collectives run inside these layers and are timed by the group, which is where the
// program's tensor instructions are executed. Built `beside_gemm` (the plan's
// comm_beside_gemm: tp_comm_overlap), a sequence-parallel edge runs in chunks beside the
// layer's GEMM (overlapped_linear.hpp) rather than blocking before or after it.
//
// Parameters are created uninitialised and unsliced values never exist here: GPTModel
// draws the whole layer's values and copies this rank's slice in.
#include <torch/torch.h>

#include "partune/backend/conjugates.hpp"
#include "partune/backend/tensor_parallel.hpp"

namespace partune::backend {

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when the group's degree does not divide out_features.
  ColumnParallelLinearImpl(std::int64_t in_features, std::int64_t out_features, bool bias = true,
                           TensorParallel tp = nullptr, Conjugate entry = Conjugate::f, bool beside_gemm = false);
  // x [..., in] (the same on every rank) -> Y_i [..., out / t]
  torch::Tensor forward(const torch::Tensor& x);

  std::int64_t in_features, out_features;  // of the whole (unsplit) layer
  TensorParallel tp;     // null: degree 1; kept alive here for f's backward
  Conjugate entry;       // f or sp_gather
  bool beside_gemm;      // sp_gather's all-gather in chunks beside the GEMM
  torch::Tensor weight;  // W_i = A_i^T: [out_features / t, in_features]
  torch::Tensor bias;    // b_i: [out_features / t], undefined without bias
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when the group's degree does not divide in_features.
  RowParallelLinearImpl(std::int64_t in_features, std::int64_t out_features, bool bias = true,
                        TensorParallel tp = nullptr, Conjugate exit = Conjugate::g, bool beside_gemm = false);
  // X_i [..., in / t] -> Y [..., out] (the same on every rank)
  torch::Tensor forward(const torch::Tensor& x);

  std::int64_t in_features, out_features;  // of the whole (unsplit) layer
  TensorParallel tp;     // null: degree 1
  Conjugate exit;        // g or sp_scatter
  bool beside_gemm;      // sp_scatter's reduce-scatter in chunks beside the GEMM
  torch::Tensor weight;  // W_i = A_i^T: [out_features, in_features / t]
  torch::Tensor bias;    // b: [out_features] (whole, added after the reduction)
};
TORCH_MODULE(RowParallelLinear);

}  // namespace partune::backend
