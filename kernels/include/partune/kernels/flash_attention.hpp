#pragma once
// Attention's core, softmax(scale Q K^T [+ causal mask]) V, two ways behind one
// interface: the standard one (the b x heads x s x s scores materialised, as LibTorch's
// autograd keeps them for backward) and FlashAttention (tiled, online softmax, no s x s
// matrix ever stored; backward recomputes the scores block by block from the saved
// log-sum-exp). q, k, v: [batch, heads, seq, head_dim]. On the CPU fp32 (the tiles in
// kernels/src/flash_attention_cpu.cpp); CUDA tensors go to the CUDA kernels
// (flash_attention_cuda.hpp) when the build found nvcc, fp16/bf16.
#include <cstdint>

#include <torch/torch.h>

namespace partune::kernels {

struct FlashAttentionOptions {
  std::int64_t block_q = 128;  // query rows per tile
  std::int64_t block_k = 256;  // keys per tile
};

// softmax(q k^T / sqrt(head_dim)) under the causal mask (key j > query i masked) when
// `causal`: [batch, heads, seq, seq].
torch::Tensor attention_probabilities(const torch::Tensor& q, const torch::Tensor& k, bool causal);

// The standard path: attention_probabilities(q, k) v, through LibTorch's autograd.
torch::Tensor standard_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal);

// FlashAttention, an autograd function: the output [batch, heads, seq, head_dim], and
// gradients for q, k and v. Throws std::invalid_argument naming what is wrong with the
// inputs (rank, shapes, dtype, device, block sizes).
torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                              const FlashAttentionOptions& options = {});

// Whether this build has the CUDA kernels (nvcc found at configure time).
bool flash_attention_has_cuda();

// What `flash_attention: true` runs (the backend's attention core, what calibrate times):
// on CUDA tensors with LibTorch >= 2.0, LibTorch's fused scaled_dot_product_attention
// (FlashAttention-2, cuDNN or memory-efficient attention, its choice: what today's training
// stacks run, and what the GPU profiles' flash_efficiency describes); otherwise, or with
// PARTUNE_ATTENTION_KERNEL=partune, flash_attention() above. Same layout and gradients.
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal);
// "sdpa" or "partune": which of the two fused_attention runs for tensors on `device`.
const char* fused_attention_kernel(const torch::Device& device);

}  // namespace partune::kernels
