#pragma once
// Where a rank computes and in which number format: the CPU in fp32 (Gloo; what CI and
// the developers' machines run), or one CUDA device in the job's training precision
// (bf16, fp16, or fp8 as bf16 with fp8 GEMMs: parameters, activations and gradients in that format, the optimizer on
// fp32 master copies; executor.cpp). Timing synchronises the device at each
// instruction boundary, and peak memory is the CUDA caching allocator's peak of allocated
// bytes: what the cost model's memory figures describe.
#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "partune/backend/trainer.hpp"

namespace partune::backend {

struct ComputeDevice {
  torch::Device device{torch::kCPU};
  torch::ScalarType dtype = torch::kFloat;
  bool fp8_gemms = false;  // fp8 jobs on CUDA: the projections' GEMMs in fp8 (fp8_linear.hpp)
  bool cuda() const { return device.is_cuda(); }
  torch::TensorOptions options() const { return torch::TensorOptions().device(device).dtype(dtype); }
  // "cpu fp32", "cuda:0 bf16 (NVIDIA H200)"
  std::string describe() const;
};

// Why `kind` cannot run `job` here (empty when it can): no CUDA device visible (or a
// LibTorch built without CUDA), or a precision the backend does not run on that device
// (fp8 without at::_scaled_mm, LibTorch before 2.5: refused by name).
std::string why_not_on_device(DeviceKind kind, Precision precision);

// The device of the rank with this local rank: the CPU, or CUDA device
// local_rank % device_count (made current for this process).
ComputeDevice compute_device(DeviceKind kind, Precision precision, int local_rank);

// The device's work so far, finished (no-op on the CPU): instruction times are read after it.
void synchronize(const ComputeDevice& d);

// Device memory peak (the CUDA caching allocator's allocated bytes; on the CPU the counting
// allocator's tensor bytes, memory_accounting.hpp), and its reset at a step's start.
void reset_peak_memory(const ComputeDevice& d);
std::int64_t peak_memory_bytes(const ComputeDevice& d);

// Host memory that copies to and from `d` can run asynchronously from: pinned on CUDA.
torch::Tensor host_copy(const torch::Tensor& t, const ComputeDevice& d);

}  // namespace partune::backend
