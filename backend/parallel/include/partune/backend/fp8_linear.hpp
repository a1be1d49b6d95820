#pragma once
// The layers' projections (the column- and row-parallel linears of attention, MLP and the
// LM head): LibTorch's linear, or, when the job trains in fp8 on a GPU, FP8 GEMMs as
// Transformer Engine runs them with per-tensor current scaling: each operand cast to
// e4m3 with the scale that maps its absolute maximum to e4m3's largest value (448),
// the product by at::_scaled_mm into the activations' format (fast accumulation in the
// forward, full accumulation in the two backward GEMMs), the casts of the input and
// weight kept for backward in fp8 (1 byte an element). The cost model prices the same:
// every GEMM at the profile's fp8 efficiency plus the casts (op_cost.cpp).
//
// A GEMM with a dimension not divisible by 16 (cuBLASLt's fp8 constraint; e.g. GPT-2's
// 50,257-token vocabulary, which Megatron pads to a multiple of 128) stays in the
// activations' format. Needs LibTorch 2.5 or later (torch_compat.hpp); the rank's choice is
// process-wide, set once by compute_device() (a process is a rank).
#include <torch/torch.h>

namespace partune::backend {

// Whether this LibTorch has at::_scaled_mm (2.5 or later).
bool fp8_gemms_available();

// The rank's GEMM format: fp8 (true) or the activations' own (false, the default).
void set_fp8_gemms(bool on);
bool fp8_gemms();

// y = x W^T (+ b), W [out, in]: in fp8 when fp8_gemms() and the shapes allow.
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

}  // namespace partune::backend
