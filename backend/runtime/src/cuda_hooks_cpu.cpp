// cuda_hooks.hpp for a LibTorch without CUDA: unreachable (compute_device.cpp refuses the
// CUDA device before any of these could be called), so each says why it cannot run.
#include <stdexcept>

#include "cuda_hooks.hpp"

namespace partune::backend::cuda_hooks {

namespace {
[[noreturn]] void no_cuda() { throw std::logic_error("partune was built against a LibTorch without CUDA"); }
}  // namespace

void set_device(int) { no_cuda(); }
std::string device_name(int) { no_cuda(); }
void reset_peak_allocated(int) { no_cuda(); }
std::int64_t peak_allocated_bytes(int) { no_cuda(); }
void* record_event(int) { no_cuda(); }
double elapsed_ms(void*, void*) { no_cuda(); }
void destroy_event(void*) {}

}  // namespace partune::backend::cuda_hooks
