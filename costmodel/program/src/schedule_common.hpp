#pragma once
// Private to the schedule files: the warm-up / steady 1F1B / cool-down skeleton that
// 1F1B and interleaved 1F1B share.
#include <algorithm>
#include <vector>

#include "partune/costmodel/program.hpp"
#include "partune/costmodel/schedule.hpp"

namespace partune {

namespace detail {
// warm-up forwards, steady 1F1B, cool-down backwards, over
// `total` work items, mapped to (micro-batch, chunk) by the caller's functions.
template <class ForwardOf, class BackwardOf>
std::vector<ScheduleStep> one_forward_one_backward(int total, int warmup, ForwardOf fwd, BackwardOf bwd) {
  std::vector<ScheduleStep> steps;
  steps.reserve(2 * total);
  warmup = std::clamp(warmup, 0, total);
  for (int k = 0; k < warmup; ++k) steps.push_back(fwd(k));
  for (int k = 0; k < total - warmup; ++k) {
    steps.push_back(fwd(warmup + k));
    steps.push_back(bwd(k));
  }
  for (int k = total - warmup; k < total; ++k) steps.push_back(bwd(k));
  return steps;
}
}  // namespace detail

}  // namespace partune
