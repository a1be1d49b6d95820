// Tensor-byte accounting on CPU (memory_accounting.hpp): an allocator that wraps LibTorch's
// CPU allocator and counts what passes through it.
#include "partune/backend/memory_accounting.hpp"

#include <atomic>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>

namespace partune::backend {

namespace {

std::atomic<std::int64_t> g_in_use{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<std::int64_t> g_host_in_use{0};
thread_local bool t_host_scope = false;

void count_device_allocation(std::int64_t bytes) {
  const std::int64_t now = g_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Host storage (HostMemoryScope) is counted apart; the flag travels with the allocation.
void count_allocation(std::int64_t bytes, bool host) {
  if (host) g_host_in_use.fetch_add(bytes, std::memory_order_relaxed);
  else count_device_allocation(bytes);
}

void count_free(std::int64_t bytes, bool host) {
  (host ? g_host_in_use : g_in_use).fetch_sub(bytes, std::memory_order_relaxed);
}

// The wrapped allocator, and its raw deleter when it has one.
c10::Allocator* g_base = nullptr;
c10::DeleterFnPtr g_base_raw_deleter = nullptr;

// The deleter must know the size it frees, and a DataPtr's context is one pointer. When
// the base allocator is "raw" (context == data, one deleter for all: the default CPU
// allocator is), the size goes into a header in front of the data, and the wrapper stays
// raw too (Allocator::raw_allocate / raw_deallocate keep working for the code that uses
// them). The header is gAlignment bytes (at least two words: the size, then whether it is
// host storage), so the data keeps the base's alignment.
constexpr std::size_t kHeader =
    c10::gAlignment >= 2 * sizeof(std::size_t) ? c10::gAlignment : 2 * sizeof(std::size_t);

void delete_with_header(void* data) {
  if (data == nullptr) return;
  char* block = static_cast<char*>(data) - kHeader;
  std::size_t bytes, host;
  std::memcpy(&bytes, block, sizeof bytes);
  std::memcpy(&host, block + sizeof bytes, sizeof host);
  count_free(static_cast<std::int64_t>(bytes), host != 0);
  g_base_raw_deleter(block);
}

// Otherwise the context is a record holding the base's own context and the size.
struct CountedAllocation {
  std::unique_ptr<void, c10::DeleterFnPtr> base_context;
  std::size_t bytes;
  bool host;
};

void delete_counted_allocation(void* context) {
  auto* record = static_cast<CountedAllocation*>(context);
  count_free(static_cast<std::int64_t>(record->bytes), record->host);
  delete record;  // frees the storage through the base's deleter
}

// allocate() is const in LibTorch 1.13 and not from 2.0, which adds a pure virtual
// copy_data (torch_compat.hpp): both overloads are defined, without `override`, so that one
// of them overrides on either version.
struct CountingCPUAllocator final : c10::Allocator {
  c10::DataPtr allocate(std::size_t n) const { return counted(n); }
  c10::DataPtr allocate(std::size_t n) { return counted(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
  c10::DataPtr counted(std::size_t n) const {
    if (g_base_raw_deleter != nullptr) {
      if (n == 0) return c10::DataPtr(nullptr, nullptr, &delete_with_header, c10::Device(c10::DeviceType::CPU));
      c10::DataPtr block = g_base->allocate(n + kHeader);
      const c10::Device device = block.device();
      char* start = static_cast<char*>(block.release_context());
      const std::size_t host = t_host_scope ? 1 : 0;
      std::memcpy(start, &n, sizeof n);
      std::memcpy(start + sizeof n, &host, sizeof host);
      count_allocation(static_cast<std::int64_t>(n), host != 0);
      return c10::DataPtr(start + kHeader, start + kHeader, &delete_with_header, device);
    }
    c10::DataPtr inner = g_base->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    auto* record = new CountedAllocation{std::move(inner.move_context()), n, t_host_scope};
    count_allocation(static_cast<std::int64_t>(n), t_host_scope);
    return c10::DataPtr(data, record, &delete_counted_allocation, device);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return g_base_raw_deleter != nullptr ? &delete_with_header : nullptr;
  }
};

CountingCPUAllocator g_counting_allocator;
std::mutex g_install_mutex;
bool g_installed = false;

// Above the default allocator's registration (priority 0), so that an allocator registered
// later at the default priority does not silently end the accounting.
constexpr std::uint8_t kPriority = 1;

}  // namespace

void install_cpu_memory_accounting() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (g_installed) return;
  c10::Allocator* current = c10::GetCPUAllocator();
  g_base = current;
  g_base_raw_deleter = current->raw_deleter();
  if (g_base_raw_deleter != nullptr) {
    // The header scheme relies on the raw contract (context == data, that deleter); check
    // it once rather than trust it.
    const c10::DataPtr probe = current->allocate(kHeader);
    if (probe.get() != probe.get_context() || probe.get_deleter() != g_base_raw_deleter) g_base_raw_deleter = nullptr;
  }
  c10::SetCPUAllocator(&g_counting_allocator, kPriority);
  if (c10::GetCPUAllocator() != &g_counting_allocator)
    throw std::runtime_error(
        "cannot account CPU tensor memory: another CPU allocator was registered with a higher priority");
  g_installed = true;
}

bool cpu_memory_accounting_installed() {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  return g_installed;
}

std::int64_t cpu_tensor_bytes_in_use() { return g_in_use.load(std::memory_order_relaxed); }

std::int64_t cpu_tensor_bytes_peak() { return g_peak.load(std::memory_order_relaxed); }

HostMemoryScope::HostMemoryScope() : previous_(t_host_scope) { t_host_scope = true; }

HostMemoryScope::~HostMemoryScope() { t_host_scope = previous_; }

std::int64_t cpu_host_tensor_bytes_in_use() { return g_host_in_use.load(std::memory_order_relaxed); }

void reset_cpu_tensor_bytes_peak() { g_peak.store(g_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace partune::backend
