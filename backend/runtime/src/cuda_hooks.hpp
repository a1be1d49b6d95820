#pragma once
// The CUDA calls compute_device.cpp makes, behind plain functions: cuda_hooks_cuda.cpp
// implements them when LibTorch was built with CUDA (PARTUNE_TORCH_CUDA), cuda_hooks_cpu.cpp
// otherwise (they are never reached there: no CUDA device is ever visible).
#include <cstdint>
#include <string>

namespace partune::backend::cuda_hooks {

void set_device(int index);
std::string device_name(int index);
void reset_peak_allocated(int index);
std::int64_t peak_allocated_bytes(int index);

// CUDA events on device `index`'s current stream (device_clock.hpp): one created and
// recorded now; the milliseconds between two completed ones; its release.
void* record_event(int index);
double elapsed_ms(void* from, void* to);
void destroy_event(void* event);

}  // namespace partune::backend::cuda_hooks
