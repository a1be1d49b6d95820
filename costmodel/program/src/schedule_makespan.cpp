// The schedules run together (schedule.hpp's schedule_makespan): a list-scheduling walk
// over every stage's steps with the dependencies the steps carry.
#include "partune/costmodel/schedule.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace partune {

namespace {

// When each (model chunk, micro-batch) finished its forward and its input gradients;
// -1: not yet.
struct Done {
  int microbatches = 0;
  std::vector<double> forward, input;
  Done(int chunks, int m) : microbatches(m), forward(chunks * m, -1.0), input(chunks * m, -1.0) {}
  double& f(int chunk, int mb) { return forward[chunk * microbatches + mb]; }
  double& b(int chunk, int mb) { return input[chunk * microbatches + mb]; }
};

}  // namespace

double schedule_makespan(const ParallelConfig& pc, const std::vector<ChunkTimes>& per_stage) {
  const int p = pc.pipeline_parallel_degree, v = pc.virtual_stages, m = pc.microbatches, chunks = p * v;
  if (static_cast<int>(per_stage.size()) != p) throw std::invalid_argument("schedule_makespan: one time per stage");
  std::vector<std::vector<ScheduleStep>> steps(p);
  for (int s = 0; s < p; ++s) steps[s] = remembered_schedule_steps(pc, s);  // a copy
  Done done(chunks, m);
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  const bool split = splits_backward(pc.pipeline);
  double makespan = 0;
  for (bool progressed = true; progressed;) {
    progressed = false;
    for (int s = 0; s < p; ++s) {
      for (; next[s] < steps[s].size(); ++next[s]) {
        const ScheduleStep& st = steps[s][next[s]];
        const int k = model_chunk(pc, s, st.chunk);
        double ready = free_at[s], seconds = 0;
        const ChunkTimes& t = per_stage[s];
        if (st.forward) {
          if (k > 0 && done.f(k - 1, st.microbatch) < 0) break;
          if (k > 0) ready = std::max(ready, done.f(k - 1, st.microbatch));
          seconds = t.forward;
        } else if (st.weight) {
          ready = std::max(ready, done.b(k, st.microbatch));  // its own B ran earlier on this stage
          seconds = t.weight;
        } else {
          if (k < chunks - 1 && done.b(k + 1, st.microbatch) < 0) break;
          if (k < chunks - 1) ready = std::max(ready, done.b(k + 1, st.microbatch));
          ready = std::max(ready, done.f(k, st.microbatch));
          seconds = t.input + (split ? 0.0 : t.weight);
        }
        const double end = ready + seconds;
        if (st.forward) done.f(k, st.microbatch) = end;
        else if (!st.weight) done.b(k, st.microbatch) = end;
        free_at[s] = end;
        makespan = std::max(makespan, end);
        progressed = true;
      }
    }
  }
  for (int s = 0; s < p; ++s)
    if (next[s] < steps[s].size()) throw std::logic_error("schedule_makespan: the schedules deadlock");
  return makespan;
}

}  // namespace partune
