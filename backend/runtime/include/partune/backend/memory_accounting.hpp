#pragma once
// Peak memory of a rank on CPU, as an accounting of tensor bytes: the bytes LibTorch's CPU
// allocator has handed out and not taken back. It is what the cost model's memory figures
// describe (parameters, gradients, optimizer state, activations), without the allocator's
// and the process's own overhead, so it can be compared with them rank by rank. No
// LibTorch in this header.
//
// install_cpu_memory_accounting() wraps the current CPU allocator (c10::GetCPUAllocator())
// and registers the wrapper in its place; from then on every CPU tensor storage allocated
// is counted until it is freed. Storage allocated before is neither counted nor
// subtracted. Install it early, before other threads allocate (c10::SetCPUAllocator is
// not thread-safe).
#include <cstdint>

namespace partune::backend {

// Idempotent. Throws std::runtime_error when another allocator registered with a higher
// priority keeps the wrapper out.
void install_cpu_memory_accounting();

// Whether install_cpu_memory_accounting() has run.
bool cpu_memory_accounting_installed();

// Bytes of CPU tensor storage allocated through the wrapper and not yet freed.
std::int64_t cpu_tensor_bytes_in_use();

// The largest cpu_tensor_bytes_in_use() since installation or the last reset.
std::int64_t cpu_tensor_bytes_peak();

// Starts a new peak from the bytes in use now (e.g. at the start of a training step).
void reset_cpu_tensor_bytes_peak();

// Storage allocated on this thread while a HostMemoryScope is alive stands for host
// memory (state offload's optimizer state and parameter copies, offloaded activations):
// on CPU the "device" and the host are one memory, and the cost model's peak is the
// device's. Such storage is counted apart (cpu_host_tensor_bytes_in_use), never in the
// figures above, until it is freed. Scopes nest.
class HostMemoryScope {
 public:
  HostMemoryScope();
  ~HostMemoryScope();
  HostMemoryScope(const HostMemoryScope&) = delete;
  HostMemoryScope& operator=(const HostMemoryScope&) = delete;

 private:
  bool previous_;
};

// Bytes of storage allocated inside a HostMemoryScope and not yet freed.
std::int64_t cpu_host_tensor_bytes_in_use();

}  // namespace partune::backend
