// DeviceClock (device_clock.hpp) over cuda_hooks' events.
#include "device_clock.hpp"

#include "cuda_hooks.hpp"

namespace partune::backend {

DeviceClock::DeviceClock(int device_index, double wall_seconds)
    : device_(device_index), wall_(wall_seconds), anchor_(cuda_hooks::record_event(device_index)) {}

DeviceClock::~DeviceClock() {
  cuda_hooks::destroy_event(anchor_);
  for (void* e : recorded_) cuda_hooks::destroy_event(e);
}

void* DeviceClock::record() {
  recorded_.push_back(cuda_hooks::record_event(device_));
  return recorded_.back();
}

void DeviceClock::span(std::size_t index, void* begin, void* end) { spans_.push_back({index, begin, end}); }

void DeviceClock::settle(std::vector<TraceEvent>& events, double t0) const {
  for (const Span& s : spans_) {
    if (s.index >= events.size()) continue;
    TraceEvent& e = events[s.index];
    e.start = wall_ - t0 + cuda_hooks::elapsed_ms(anchor_, s.begin) * 1e-3;
    e.end = wall_ - t0 + cuda_hooks::elapsed_ms(anchor_, s.end) * 1e-3;
  }
}

}  // namespace partune::backend
