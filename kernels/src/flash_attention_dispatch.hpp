#pragma once
// FlashAttention on CUDA tensors: the glue between LibTorch tensors and the pointer-based
// CUDA kernels (flash_attention_cuda.hpp), compiled by the host compiler. Without the CUDA
// kernels in the build (no nvcc at configure time) every call throws.
#include <torch/torch.h>

namespace partune::kernels::detail {

// out [batch, heads, seq, head_dim] and lse [batch, heads, seq] (fp32) are allocated by
// the caller on q's device.
void cuda_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                  torch::Tensor& out, torch::Tensor& lse);

// dq, dk, dv allocated by the caller like q.
void cuda_backward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& out,
                   const torch::Tensor& dout, const torch::Tensor& lse, bool causal, torch::Tensor& dq,
                   torch::Tensor& dk, torch::Tensor& dv);

}  // namespace partune::kernels::detail
