// The attention core `flash_attention: true` runs (flash_attention.hpp): LibTorch's fused
// scaled_dot_product_attention on CUDA where LibTorch has it (2.0 on), partune's own
// FlashAttention otherwise. partune's CUDA kernel computes on the CUDA cores in fp32
// (5-20x slower than LibTorch's on an H200: flash_attention_sdpa_check); it stays the
// reference and the CPU path, and PARTUNE_ATTENTION_KERNEL=partune runs it on a GPU.
#include <cstdlib>
#include <string>

#include <torch/version.h>

#include "partune/kernels/flash_attention.hpp"

namespace partune::kernels {

namespace {

#if TORCH_VERSION_MAJOR >= 2
bool partune_kernel_asked() {
  const char* v = std::getenv("PARTUNE_ATTENTION_KERNEL");
  return v != nullptr && std::string(v) == "partune";
}
#endif

}  // namespace

const char* fused_attention_kernel(const torch::Device& device) {
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_cuda() && !partune_kernel_asked()) return "sdpa";
#endif
  (void)device;
  return "partune";
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
#if TORCH_VERSION_MAJOR >= 2
  if (std::string(fused_attention_kernel(q.device())) == "sdpa")
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/causal);
#endif
  return flash_attention(q, k, v, causal);
}

}  // namespace partune::kernels
