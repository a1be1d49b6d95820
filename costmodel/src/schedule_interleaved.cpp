// Interleaved 1F1B with virtual stages (Narayanan et al. SC'21, Megatron-LM's schedule):
// each rank holds `chunks` model chunks; work goes in groups of `stages` micro-batches per
// chunk, which shrinks the bubble to (p - 1) / (v m).
#include "partune/costmodel/program.hpp"

#include "schedule_common.hpp"

namespace partune {

std::vector<ScheduleStep> schedule_interleaved(int stages, int microbatches, int chunks, int stage,
                                               int active) {
  // active_microbatches cannot shorten this warm-up: a chunk's backward needs its own
  // forward, which the warm-up of (chunks - 1) * stages forwards is what delivers.
  (void)active;
  const int total = microbatches * chunks;
  int warmup = (stages - stage - 1) * 2 + (chunks - 1) * stages;
  auto microbatch_of = [=](int k) { return (k / (stages * chunks)) * stages + k % stages; };
  auto chunk_of = [=](int k) { return (k / stages) % chunks; };
  return detail::one_forward_one_backward(
      total, warmup, [&](int k) { return ScheduleStep{true, microbatch_of(k), chunk_of(k)}; },
      [&](int k) { return ScheduleStep{false, microbatch_of(k), chunks - 1 - chunk_of(k)}; });
}

}  // namespace partune
