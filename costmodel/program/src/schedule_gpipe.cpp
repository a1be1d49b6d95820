// GPipe ("simple" in SMP): every forward, then every backward. With active_microbatches
// below the micro-batch count, micro-batches go through in windows of that size.
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/schedule.hpp"

#include <algorithm>

namespace partune {

std::vector<ScheduleStep> schedule_gpipe(int stages, int microbatches, int stage, int active) {
  std::vector<ScheduleStep> steps;
  steps.reserve(2 * microbatches);
  const int window = warmup_steps(PipelineSchedule::gpipe, stages, microbatches, 1, stage, active);
  for (int start = 0; start < microbatches; start += window) {
    const int end = std::min(microbatches, start + window);
    for (int mb = start; mb < end; ++mb) steps.push_back({true, mb, 0});
    for (int mb = start; mb < end; ++mb) steps.push_back({false, mb, 0});
  }
  (void)stages;
  (void)stage;
  return steps;
}

}  // namespace partune
