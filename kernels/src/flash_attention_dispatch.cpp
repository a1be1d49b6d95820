// CUDA tensors to the CUDA kernels (flash_attention_dispatch.hpp). LibTorch's current
// stream is not reachable from a CPU build's headers: the kernels run on the default
// stream, which LibTorch's own default stream is.
#include "flash_attention_dispatch.hpp"

#include <cmath>
#include <stdexcept>

#include "partune/kernels/flash_attention.hpp"
#ifdef PARTUNE_HAVE_CUDA_ATTENTION
#include "partune/kernels/flash_attention_cuda.hpp"
#endif

namespace partune::kernels {

bool flash_attention_has_cuda() {
#ifdef PARTUNE_HAVE_CUDA_ATTENTION
  return true;
#else
  return false;
#endif
}

namespace detail {

#ifdef PARTUNE_HAVE_CUDA_ATTENTION
namespace {

cuda::ElementType element_type(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kHalf) return cuda::ElementType::f16;
  if (t.scalar_type() == torch::kBFloat16) return cuda::ElementType::bf16;
  throw std::invalid_argument("flash_attention: the CUDA kernel takes float16 or bfloat16");
}

cuda::AttentionShape shape_of(const torch::Tensor& q, bool causal) {
  cuda::AttentionShape s;
  s.batch_heads = static_cast<int>(q.size(0) * q.size(1));
  s.seq_len = static_cast<int>(q.size(2));
  s.head_dim = static_cast<int>(q.size(3));
  s.causal = causal;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  return s;
}

}  // namespace

void cuda_forward(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in, bool causal,
                  torch::Tensor& out, torch::Tensor& lse) {
  const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  cuda::flash_attention_forward(element_type(q), shape_of(q, causal), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                out.data_ptr(), lse.data_ptr<float>(), nullptr);
}

void cuda_backward(const torch::Tensor& q_in, const torch::Tensor& k_in, const torch::Tensor& v_in,
                   const torch::Tensor& out, const torch::Tensor& dout, const torch::Tensor& lse, bool causal,
                   torch::Tensor& dq, torch::Tensor& dk, torch::Tensor& dv) {
  const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const cuda::AttentionShape s = shape_of(q, causal);
  torch::Tensor workspace = torch::empty({static_cast<std::int64_t>(cuda::flash_attention_backward_workspace_bytes(s) / 4 + 1)},
                                         q.options().dtype(torch::kFloat32));
  cuda::flash_attention_backward(element_type(q), s, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
                                 dout.data_ptr(), lse.data_ptr<float>(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                                 workspace.data_ptr<float>(), nullptr);
}
#else
void cuda_forward(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, bool, torch::Tensor&,
                  torch::Tensor&) {
  throw std::invalid_argument("flash_attention: CUDA tensors, and this build has no CUDA kernels (nvcc not found)");
}

void cuda_backward(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                   const torch::Tensor&, const torch::Tensor&, bool, torch::Tensor&, torch::Tensor&, torch::Tensor&) {
  throw std::invalid_argument("flash_attention: CUDA tensors, and this build has no CUDA kernels (nvcc not found)");
}
#endif

}  // namespace detail

}  // namespace partune::kernels
