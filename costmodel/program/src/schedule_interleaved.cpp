// Interleaved 1F1B with virtual stages (Narayanan et al. SC'21, Megatron-LM's schedule):
// each rank holds `chunks` model chunks; work goes in groups of `stages` micro-batches per
// chunk, which shrinks the bubble to (p - 1) / (v m).
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/schedule.hpp"

#include "schedule_common.hpp"

namespace partune {

std::vector<ScheduleStep> schedule_interleaved(int stages, int microbatches, int chunks, int stage,
                                               int active) {
  const int total = microbatches * chunks;
  const int warmup = warmup_steps(PipelineSchedule::one_f_one_b, stages, microbatches, chunks, stage, active);
  auto microbatch_of = [=](int k) { return (k / (stages * chunks)) * stages + k % stages; };
  auto chunk_of = [=](int k) { return (k / stages) % chunks; };
  return detail::one_forward_one_backward(
      total, warmup, [&](int k) { return ScheduleStep{true, microbatch_of(k), chunk_of(k)}; },
      [&](int k) { return ScheduleStep{false, microbatch_of(k), chunks - 1 - chunk_of(k)}; });
}

}  // namespace partune
