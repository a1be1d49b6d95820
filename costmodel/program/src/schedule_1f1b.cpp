// 1F1B ("interleaved" in SMP with one chunk per rank; PipeDream-flush): a warm-up of
// forwards that shrinks towards the last stage, then one forward / one backward, then a
// cool-down of backwards. At most min(stages - stage, microbatches) micro-batches are in
// flight on a stage; active_microbatches caps the warm-up further.
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/schedule.hpp"

#include <algorithm>
#include <map>
#include <tuple>

#include "schedule_common.hpp"

namespace partune {


std::vector<ScheduleStep> schedule_1f1b(int stages, int microbatches, int stage, int active) {
  return detail::one_forward_one_backward(
      microbatches, warmup_steps(PipelineSchedule::one_f_one_b, stages, microbatches, 1, stage, active), [](int k) { return ScheduleStep{true, k, 0}; },
      [](int k) { return ScheduleStep{false, k, 0}; });
}

int active_microbatches(const ParallelConfig& pc) {
  return pc.active_microbatches > 0 ? pc.active_microbatches : pc.pipeline_parallel_degree + 2;
}

int schedule_stages(const ParallelConfig& pc) {
  const bool one_f_one_b = pc.pipeline == PipelineSchedule::one_f_one_b && pc.virtual_stages == 1;
  return pc.pipeline_parallel_degree + (one_f_one_b && pc.lm_head_stage == LmHeadStage::first ? 1 : 0);
}

int warmup_steps(PipelineSchedule schedule, int stages, int microbatches, int chunks, int stage, int active) {
  if (schedule == PipelineSchedule::gpipe) return active > 0 ? std::min(active, microbatches) : microbatches;
  if (schedule == PipelineSchedule::zb_h1) return stages - stage - 1;
  if (chunks > 1) return (stages - stage - 1) * 2 + (chunks - 1) * stages;
  const int warmup = stages - stage - 1;
  return active > 0 ? std::min(warmup, active - 1) : warmup;
}

std::vector<ScheduleStep> schedule_steps(const ParallelConfig& pc, int stage) {
  const int p = schedule_stages(pc), m = pc.microbatches, active = active_microbatches(pc);
  if (pc.pipeline == PipelineSchedule::gpipe) return schedule_gpipe(p, m, stage, active);
  if (pc.pipeline == PipelineSchedule::zb_h1) return schedule_zb_h1(p, m, stage);
  if (pc.pipeline == PipelineSchedule::zbv) return schedule_zbv(p, m, stage);
  if (pc.pipeline == PipelineSchedule::dualpipev) return schedule_dualpipev(p, m, stage);
  if (pc.virtual_stages > 1) return schedule_interleaved(p, m, pc.virtual_stages, stage, active);
  return schedule_1f1b(p, m, stage, active);
}

const std::vector<ScheduleStep>& remembered_schedule_steps(const ParallelConfig& pc, int stage) {
  // What schedule_steps reads of pc. At most about 4M steps (48 MB) kept a thread.
  using Key = std::tuple<PipelineSchedule, int, int, int, int, int>;
  thread_local std::map<Key, std::vector<ScheduleStep>> kept;
  thread_local std::size_t kept_steps = 0;
  const Key key{pc.pipeline, schedule_stages(pc), pc.microbatches, pc.virtual_stages, active_microbatches(pc), stage};
  if (auto it = kept.find(key); it != kept.end()) return it->second;
  std::vector<ScheduleStep> steps = schedule_steps(pc, stage);
  if (kept_steps + steps.size() > (std::size_t{1} << 22)) kept.clear(), kept_steps = 0;
  kept_steps += steps.size();
  return kept.emplace(key, std::move(steps)).first->second;
}

double in_flight_microbatches(const ParallelConfig& pc, int stage) {
  const int m = pc.microbatches, v = pc.virtual_stages;
  if (v_shaped(pc.pipeline)) return peak_in_flight(remembered_schedule_steps(pc, stage), v);  // no warm-up rule: walk it
  const int warmup = warmup_steps(pc.pipeline, schedule_stages(pc), m, v, stage, active_microbatches(pc));
  // GPipe holds its window; 1F1B its warm-up and the forward of its first steady step.
  if (pc.pipeline == PipelineSchedule::gpipe) return std::max(1, warmup);
  return std::max(1.0, static_cast<double>(std::min(warmup + 1, m * v)) / v);
}

double peak_in_flight(const std::vector<ScheduleStep>& steps, int chunks) {
  int live = 0, peak = 0;
  for (const auto& s : steps) {
    if (s.weight) continue;  // W: its micro-batch left flight at its B
    live += s.forward ? 1 : -1;
    peak = std::max(peak, live);
  }
  return static_cast<double>(peak) / chunks;
}

}  // namespace partune
