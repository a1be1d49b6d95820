// cuda_hooks.hpp on a LibTorch built with CUDA: the CUDA runtime for the device's name,
// c10's CUDA functions and its caching allocator's statistics for the rest. The
// allocator's `DeviceStats` moved between LibTorch versions (1.13: in CUDACachingAllocator;
// 2.x: c10::CachingDeviceAllocator), so it is only ever named through `auto`, and the
// aggregate statistic by its index 0 (StatType::AGGREGATE in both).
#include <cuda_runtime_api.h>

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <stdexcept>
#include <string>

#include "cuda_hooks.hpp"

namespace partune::backend::cuda_hooks {

void set_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

std::string device_name(int index) {
  cudaDeviceProp prop{};
  const cudaError_t rc = cudaGetDeviceProperties(&prop, index);
  if (rc != cudaSuccess)
    throw std::runtime_error(std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(rc));
  return prop.name;
}

void reset_peak_allocated(int index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

std::int64_t peak_allocated_bytes(int index) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[0].peak;
}

namespace {
void check(cudaError_t rc, const char* call) {
  if (rc != cudaSuccess) throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(rc));
}
}  // namespace

void* record_event(int index) {
  cudaEvent_t event = nullptr;
  check(cudaEventCreate(&event), "cudaEventCreate");
  check(cudaEventRecord(event, c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index)).stream()),
        "cudaEventRecord");
  return event;
}

double elapsed_ms(void* from, void* to) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)),
        "cudaEventElapsedTime");
  return ms;
}

void destroy_event(void* event) {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

}  // namespace partune::backend::cuda_hooks
