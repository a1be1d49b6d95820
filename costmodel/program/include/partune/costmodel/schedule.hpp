#pragma once
// The pipeline schedules (GPipe, 1F1B, interleaved 1F1B, zero-bubble ZB-H1) as pure
// functions of the parallel configuration, and their warm-up: the one rule the program
// builder, memory (micro-batches in flight) and the estimator read.
#include <vector>

#include "partune/costmodel/job.hpp"

namespace partune {

// The pipeline schedule alone: which (micro-batch, chunk) a stage runs forward or
// backward, in order. Pure functions, one per schedule. A schedule that splits backward
// (splits_backward) lists each backward twice: its input gradients (weight false: B,
// what the previous stage waits for) and, later, its weight gradients (weight true: W).
struct ScheduleStep {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;
  bool weight = false;  // a W step (forward false)
  bool operator==(const ScheduleStep& o) const {
    return forward == o.forward && microbatch == o.microbatch && chunk == o.chunk && weight == o.weight;
  }
};
// (Whether a schedule does: job.hpp's splits_backward.)
std::vector<ScheduleStep> schedule_gpipe(int stages, int microbatches, int stage, int active);
std::vector<ScheduleStep> schedule_1f1b(int stages, int microbatches, int stage, int active);
std::vector<ScheduleStep> schedule_interleaved(int stages, int microbatches, int chunks, int stage,
                                               int active);
// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3): 1F1B's warm-up
// of stages - stage - 1 forwards, then `stage` F-B pairs whose W is deferred, then
// F-B-W, then B-W, then the `stage` deferred W's filling the drain. Peak micro-batches in
// flight as 1F1B; with uniform stages and m >= p the step is
// m (F + B + W) + (p - 1)(F + B - W) against 1F1B's m (F + B + W) + (p - 1)(F + B + W).
std::vector<ScheduleStep> schedule_zb_h1(int stages, int microbatches, int stage);
// The V-shaped schedules (two chunks a stage, job.hpp's model_chunk; schedule_v.cpp):
// ZBV (Qi et al. 2024, PyTorch's ScheduleZBVZeroBubble) and DualPipeV (DeepSeek, PyTorch's
// ScheduleDualPipeV; its overlapped F&B pairs as a forward then a whole backward).
// Both need microbatches >= 2 stages.
std::vector<ScheduleStep> schedule_zbv(int stages, int microbatches, int stage);
std::vector<ScheduleStep> schedule_dualpipev(int stages, int microbatches, int stage);
// Dispatches on the job's pipeline setting and virtual stages.
std::vector<ScheduleStep> schedule_steps(const ParallelConfig& pc, int stage);
// schedule_steps built once per thread for each distinct schedule (a search asks for the
// same few hundred for a million points): valid until this thread's next call.
const std::vector<ScheduleStep>& remembered_schedule_steps(const ParallelConfig& pc, int stage);

// One micro-batch's work of a chunk on a stage: its forward, its input gradients (B) and
// its weight gradients (W; 0 or folded into B where the schedule does not split them).
struct ChunkTimes {
  double forward = 0, input = 0, weight = 0;
};
// Every stage's schedule_steps run together, each step as soon as the stage is free and
// its inputs are there: a forward after the previous model chunk's forward of its
// micro-batch, B after the next model chunk's B (and its own forward), W after its own B;
// communication free. The step's length (the estimator's pipeline for schedules without
// a closed form; m >= p or not). Throws std::logic_error if the schedules deadlock.
double schedule_makespan(const ParallelConfig& pc, const std::vector<ChunkTimes>& per_stage);

// --- The schedule's warm-up: one rule that the schedules, memory and the estimator read.
// The cap on micro-batches in flight: active_microbatches, or SMP's default
// pipeline_parallel_degree + 2.
int active_microbatches(const ParallelConfig& pc);
// Forward steps (chunk steps with virtual stages) a stage runs before its first backward,
// before clamping to the steps there are: 1F1B: stages - stage - 1, capped at active - 1;
// interleaved 1F1B: (stages - stage - 1) * 2 + (chunks - 1) * stages (its warm-up must
// deliver each chunk's forward: the cap cannot shorten it); ZB-H1: stages - stage - 1
// (uncapped: the schedule is the paper's); GPipe: its window,
// min(active, microbatches), all forwards before the window's backwards.
int warmup_steps(PipelineSchedule schedule, int stages, int microbatches, int chunks, int stage, int active);
// The pipeline's stages as the schedule sees them: a head on stage 0 (lm_head_stage:
// first) is one more stage after the last for 1F1B, so every stage warms up with one more
// forward while the last stage's output makes the round trip through the head.
int schedule_stages(const ParallelConfig& pc);
// The most micro-batches whose forward has run and backward has not on `stage`, in
// whole-stage units (a chunk counts 1/virtual_stages): what memory keeps in flight.
double in_flight_microbatches(const ParallelConfig& pc, int stage);

// The most micro-batches whose forward has run and backward has not, over a schedule
// (in units of whole-stage micro-batches: a chunk counts 1/chunks). With a split
// backward, B ends a micro-batch's flight.
double peak_in_flight(const std::vector<ScheduleStep>& steps, int chunks);
// A split backward: the most bytes a stage holds over its steps when a chunk's forward
// adds `stored` (what its backward needs), its B frees them and adds `held` (what its W
// still needs: each GEMM's input and output gradient) and its W frees those. ZB-H1 on
// stage s with m >= p and held <= stored: (p - s) stored + s held.
double peak_split_backward_bytes(const std::vector<ScheduleStep>& steps, double stored, double held);

}  // namespace partune
