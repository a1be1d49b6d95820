// The rank's device and number format (compute_device.hpp).
#include "partune/backend/compute_device.hpp"

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include "cuda_hooks.hpp"
#include "partune/backend/fp8_linear.hpp"
#include "partune/backend/memory_accounting.hpp"

namespace partune::backend {

namespace {

const char* dtype_name(torch::ScalarType t) {
  switch (t) {
    case torch::kBFloat16: return "bf16";
    case torch::kHalf: return "fp16";
    default: return "fp32";
  }
}

}  // namespace

std::string ComputeDevice::describe() const {
  if (!cuda()) return fmt::format("cpu {}", dtype_name(dtype));
  return fmt::format("cuda:{} {}{} ({})", device.index(), dtype_name(dtype), fp8_gemms ? " with fp8 GEMMs" : "",
                     cuda_hooks::device_name(device.index()));
}

std::string why_not_on_device(DeviceKind kind, Precision precision) {
  if (kind == DeviceKind::cpu) return {};
  if (precision == Precision::mxfp8 || precision == Precision::fp4)
    return fmt::format("--device cuda: precision {} (Blackwell's block-scaled GEMMs) is priced and simulated but not run "
                       "by the LibTorch backend; run the job in fp8 or bf16 (--set training.precision=bf16)",
                       to_string(precision));
  if (precision == Precision::fp8 && !fp8_gemms_available())
    return fmt::format("--device cuda: precision fp8 needs at::_scaled_mm for its GEMMs (LibTorch 2.5 or later; this "
                       "is LibTorch {}); run the job in bf16 (--set training.precision=bf16)",
                       TORCH_VERSION);
  if (!torch::cuda::is_available())
    return fmt::format("--device cuda: no CUDA device is visible (LibTorch {}{})", TORCH_VERSION,
                       torch::cuda::device_count() == 0 ? ", built without CUDA or no GPU" : "");
  return {};
}

ComputeDevice compute_device(DeviceKind kind, Precision precision, int local_rank) {
  ComputeDevice d;
  if (kind == DeviceKind::cpu) return d;
  if (const std::string why = why_not_on_device(kind, precision); !why.empty()) throw std::runtime_error(why);
  const int index = local_rank % static_cast<int>(torch::cuda::device_count());
  cuda_hooks::set_device(index);
  d.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  // tf32 and fp32 jobs run in fp32 (tf32 is a matmul mode, not a storage format); fp8
  // jobs hold bf16 parameters and activations and run their projections' GEMMs in fp8.
  d.fp8_gemms = precision == Precision::fp8;
  d.dtype = precision == Precision::bf16 || d.fp8_gemms ? torch::kBFloat16
            : precision == Precision::fp16             ? torch::kHalf
                                                       : torch::kFloat;
  set_fp8_gemms(d.fp8_gemms);
  return d;
}

void synchronize(const ComputeDevice& d) {
  if (d.cuda()) torch::cuda::synchronize(d.device.index());
}

void reset_peak_memory(const ComputeDevice& d) {
  if (d.cuda()) cuda_hooks::reset_peak_allocated(d.device.index());
  else reset_cpu_tensor_bytes_peak();
}

std::int64_t peak_memory_bytes(const ComputeDevice& d) {
  return d.cuda() ? cuda_hooks::peak_allocated_bytes(d.device.index()) : cpu_tensor_bytes_peak();
}

torch::Tensor host_copy(const torch::Tensor& t, const ComputeDevice& d) {
  if (!d.cuda()) return t.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
  torch::Tensor host = torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true));
  host.copy_(t.detach(), /*non_blocking=*/true);
  return host;
}

}  // namespace partune::backend
