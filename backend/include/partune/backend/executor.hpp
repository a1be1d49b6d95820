#pragma once
// Runs one rank's program (costmodel's build_program) instruction by instruction with
// LibTorch, single process: pipeline, tensor and data degrees all 1.
//
//   forward     the covered layers for one micro-batch; the embedding when they start at
//               model layer 0, final LN + LM head + loss when they end at the last one.
//               When the program recomputes these layers later (activation
//               checkpointing), the forward runs without autograd and keeps only its
//               input: the recompute rebuilds the graph.
//   recompute   the same layers again, with autograd, from the kept input.
//   backward    the covered layers' backward: loss.backward() for the part holding the
//               head, else output.backward(dL/d output) with the gradient the next part's
//               backward left on its input. The loss of each micro-batch is scaled by
//               1 / (micro-batches in the step), so the accumulated gradient is that of
//               the mean loss over the whole batch.
//   optimizer_step  optimizer.step() on the accumulated gradients (zeroed at the start
//               of every step).
//
// Every other instruction (send/recv, collectives, offload/reload, wait) is rejected
// before the step starts, by check_executable, naming the instruction: nothing is
// silently skipped. Each executed instruction becomes an ExecutedEvent.
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/events.hpp"
#include "partune/backend/gpt_model.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program.hpp"

namespace partune::backend {

// Thrown for a program the executor cannot run; what() names the instruction
// ("instruction 7 (send_activation, micro-batch 2, chunk 0): ...").
struct UnsupportedInstruction : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Throws UnsupportedInstruction at the first instruction this executor cannot run.
void check_executable(const Job& job, const RankProgram& program);

// One micro-batch's data: tokens and targets [sequences, seq_len], int64.
struct MicroBatchData {
  torch::Tensor tokens, targets;
};

struct StepOutcome {
  double loss = 0;  // mean over micro-batches of each micro-batch's mean token loss
  int microbatches = 0;
};

class ProgramExecutor {
 public:
  // `job` must be the job the program was built from (with the model that runs).
  ProgramExecutor(const Job& job, GPTModel model, torch::optim::Optimizer& optimizer);

  // Runs one training step: `data[i]` is global micro-batch i of the step. Appends an
  // event per executed instruction to `events` when given (times relative to `t0`).
  StepOutcome run(const RankProgram& program, const std::vector<MicroBatchData>& data,
                  std::vector<ExecutedEvent>* events = nullptr, double t0 = 0);

 private:
  const Job& job_;
  GPTModel model_;
  torch::optim::Optimizer& optimizer_;
};

// Seconds on a monotonic clock (what event times are measured with).
double monotonic_seconds();

}  // namespace partune::backend
