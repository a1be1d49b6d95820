// 1F1B ("interleaved" in SMP with one chunk per rank; PipeDream-flush): a warm-up of
// forwards that shrinks towards the last stage, then one forward / one backward, then a
// cool-down of backwards. At most min(stages - stage, microbatches) micro-batches are in
// flight on a stage; active_microbatches caps the warm-up further.
#include "partune/costmodel/program.hpp"

#include <algorithm>

#include "schedule_common.hpp"

namespace partune {


std::vector<ScheduleStep> schedule_1f1b(int stages, int microbatches, int stage, int active) {
  int warmup = stages - stage - 1;
  if (active > 0) warmup = std::min(warmup, active - 1);
  return detail::one_forward_one_backward(
      microbatches, warmup, [](int k) { return ScheduleStep{true, k, 0}; },
      [](int k) { return ScheduleStep{false, k, 0}; });
}

std::vector<ScheduleStep> schedule_steps(const ParallelConfig& pc, int stage) {
  const int p = pc.pipeline_parallel_degree, m = pc.microbatches;
  const int active = pc.active_microbatches > 0 ? pc.active_microbatches : p + 2;
  if (pc.pipeline == PipelineSchedule::simple) return schedule_gpipe(p, m, stage, active);
  if (pc.virtual_stages > 1) return schedule_interleaved(p, m, pc.virtual_stages, stage, active);
  // A head on stage 0 (lm_head_stage: first) is one more pipeline stage after the last:
  // every stage warms up with one more forward, so that the last stage has its next
  // forward to run while its output makes the round trip through the head.
  if (pc.lm_head_stage == LmHeadStage::first) return schedule_1f1b(p + 1, m, stage, active);
  return schedule_1f1b(p, m, stage, active);
}

double peak_in_flight(const std::vector<ScheduleStep>& steps, int chunks) {
  int live = 0, peak = 0;
  for (const auto& s : steps) {
    live += s.forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return static_cast<double>(peak) / chunks;
}

}  // namespace partune
