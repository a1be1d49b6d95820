// ZB-H1, the zero-bubble schedule with 1F1B's memory (Qi et al. 2023, "Zero Bubble
// Pipeline Parallelism", section 3.1 and figure 3): backward is split into the input
// gradients B, which the previous stage waits for, and the weight gradients W, which
// nothing waits for. Stage s defers s W's past the warm-up (its F-B pairs run without
// W), so the gradient travels back faster by W a stage; the deferred W's fill the drain.
#include "partune/costmodel/schedule.hpp"

#include <algorithm>

namespace partune {

std::vector<ScheduleStep> schedule_zb_h1(int stages, int microbatches, int stage) {
  std::vector<ScheduleStep> steps;
  steps.reserve(3 * microbatches);
  int f = 0, b = 0, w = 0;
  auto forward = [&] { steps.push_back({true, f++, 0, false}); };
  auto input = [&] { steps.push_back({false, b++, 0, false}); };
  auto weight = [&] { steps.push_back({false, w++, 0, true}); };
  const int warmup = warmup_steps(PipelineSchedule::zb_h1, stages, microbatches, 1, stage, 0);
  for (int k = 0; k < warmup && f < microbatches; ++k) forward();
  for (int k = 0; k < stage && f < microbatches; ++k) forward(), input();  // W deferred
  while (f < microbatches) forward(), input(), weight();
  while (b < microbatches) input(), weight();
  while (w < microbatches) weight();
  return steps;
}

double peak_split_backward_bytes(const std::vector<ScheduleStep>& steps, double stored, double held) {
  double live = 0, peak = 0;
  for (const ScheduleStep& s : steps) {
    live += s.forward ? stored : s.weight ? -held : held - stored;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace partune
