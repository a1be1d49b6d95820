#pragma once
// Instruction times on a CUDA device from CUDA events (executor.cpp): each timed
// instruction's kernels are bracketed by two events on the compute stream, nothing waits
// for them, and once the step's work is done the events' times, counted from an anchor
// event recorded on the idle device at a known wall time, become the timeline's start and
// end. The device then runs the instructions back to back as a training step does, where
// a synchronisation after each left it idle while the host launched the next one.
#include <cstddef>
#include <vector>

#include "partune/costmodel/program.hpp"

namespace partune::backend {

class DeviceClock {
 public:
  // The device is idle (synchronised) at `wall_seconds` (monotonic_seconds()).
  DeviceClock(int device_index, double wall_seconds);
  ~DeviceClock();
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;

  // An event recorded now on the device's current stream.
  void* record();
  // The timeline event at `index` spans [begin, end] (set by settle()).
  void span(std::size_t index, void* begin, void* end);
  // After the device has finished (synchronised): each spanned event's start and end, in
  // seconds since t0 as the other events are.
  void settle(std::vector<TraceEvent>& events, double t0) const;

 private:
  struct Span {
    std::size_t index;
    void *begin, *end;
  };
  int device_;
  double wall_;
  void* anchor_;
  std::vector<void*> recorded_;
  std::vector<Span> spans_;
};

}  // namespace partune::backend
