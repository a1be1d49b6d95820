#include "head_placement.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include "partune/costmodel/schedule.hpp"

namespace partune {
namespace detail {

// lm_head_stage: first. Stage 0's schedule with the head steps H(k) inserted by list
// scheduling over the cost model's times: every stage follows its own schedule, and
// stage 0, whenever it is free, runs whichever is ready first — its next schedule step
// or the head of the next micro-batch whose activation has come back from the last
// stage (the head first on a tie). H(k) always comes after F(k) (it needs the last
// stage's F(k), which needs stage 0's) and before B(k) (which needs H(k)'s gradient),
// in micro-batch order, so every order this gives is deadlock-free; the times only
// decide where between the two it sits. See docs/programs.md §4.7.
std::vector<Step> place_head_steps(const ParallelConfig& pc, const StageTimes& times) {
  const int p = pc.pipeline_parallel_degree, m = pc.microbatches;
  constexpr double never = std::numeric_limits<double>::infinity();
  std::vector<std::vector<ScheduleStep>> steps(p);
  for (int s = 0; s < p; ++s) steps[s] = schedule_steps(pc, s);
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  std::vector<std::vector<double>> forward_end(p, std::vector<double>(m, never)),
      backward_end(p, std::vector<double>(m, never));
  std::vector<double> head_end(m, never);
  int next_head = 0;
  std::vector<Step> order;
  order.reserve(steps[0].size() + m);
  for (;;) {
    // (start, head first, stage): the earliest startable step over all stages.
    double best_start = never;
    int best_stage = -1;
    bool best_head = false;
    for (int s = 0; s < p; ++s) {
      if (s == 0 && next_head < m) {
        const double start = std::max(free_at[0], forward_end[p - 1][next_head] + times.hop);
        if (start < best_start) best_start = start, best_stage = 0, best_head = true;
      }
      if (next[s] == steps[s].size()) continue;
      const ScheduleStep& st = steps[s][next[s]];
      if (s == 0 && !st.forward && st.microbatch >= next_head) continue;  // B(k) after H(k)
      double ready;
      if (st.forward) ready = s == 0 ? 0.0 : forward_end[s - 1][st.microbatch] + times.hop;
      else ready = (s == p - 1 ? head_end[st.microbatch] : backward_end[s + 1][st.microbatch]) + times.hop;
      const double start = std::max(free_at[s], ready);
      if (start < best_start) best_start = start, best_stage = s, best_head = false;
    }
    if (best_stage < 0) break;  // everything placed
    if (best_head) {
      free_at[0] = head_end[next_head] = best_start + times.head;
      order.push_back({Step::head, next_head++, 0});
      continue;
    }
    const ScheduleStep& st = steps[best_stage][next[best_stage]++];
    const double end = best_start + (st.forward ? times.forward[best_stage] : times.backward[best_stage]);
    free_at[best_stage] = end;
    (st.forward ? forward_end : backward_end)[best_stage][st.microbatch] = end;
    if (best_stage == 0) order.push_back({st.forward ? Step::forward : Step::backward, st.microbatch, st.chunk});
  }
  if (order.size() != steps[0].size() + static_cast<std::size_t>(m))
    throw std::logic_error("place_head_steps: the pipeline schedules deadlock");  // cannot happen for 1F1B/GPipe
  return order;
}

}  // namespace detail
}  // namespace partune
