#pragma once
// Adam stepped over all of a rank's parameters at once with LibTorch's multi-tensor
// ("foreach") kernels, as PyTorch's own optimizer does by default on CUDA tensors and as
// the training stacks' fused Adam does (Apex / Transformer Engine FusedAdam in
// Megatron-LM): one launch per operation over chunks of many tensors, not one per
// parameter. torch::optim::Adam launches ~7 kernels for each parameter tensor; on a GPU a
// 1.3B GPT's ~290 tensors made its step 3-4x the cost model's pass over the optimizer state
// (docs/gpu.md, 2026-11-26 H200 run).
//
// On CUDA fp32 parameters (the bf16 jobs' master weights) with LibTorch 2.x it runs the
// fused Adam kernel (at::_fused_adam_, torch.optim.Adam(fused=True)): one pass over
// parameter, gradient and moments, ~28 bytes a parameter. Elsewhere the foreach
// operations, in groups of 2^26 elements so that their temporary square roots stay small.
// The 2026-11-26 H100 run measured the foreach step as slow as the per-tensor loop (50 ms
// for 1.3B parameters: ~100 bytes a parameter moved, bandwidth- not launch-bound).
//
// Same arithmetic as torch::optim::Adam (the update order of its step: tests compare the
// two), the same state objects (AdamParamState, so checkpoints save and load through
// torch::optim::Optimizer unchanged). Options it does not step in bulk (weight decay,
// amsgrad) fall back to torch::optim::Adam's own step.
#include <torch/torch.h>

namespace partune::backend {

class MultiTensorAdam : public torch::optim::Adam {
 public:
  using torch::optim::Adam::Adam;
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace partune::backend
