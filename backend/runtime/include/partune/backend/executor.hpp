#pragma once
// Runs one rank's program (costmodel's build_program, layer granularity) instruction by
// instruction with LibTorch; the same program the simulator runs (docs/architecture.md,
// sections 2 and 8).
//
//   forward / recompute / backward   the covered layers for one micro-batch (the
//        embedding with the first model layer, final LN + LM head + loss with the last,
//        or on stage 0 alone with lm_head_stage: first). A forward the program later
//        recomputes runs without autograd and keeps only its input (full checkpointing),
//        or with autograd, its attention cores keeping only Q, K and V (selective: the
//        recompute computes their probabilities again). Each micro-batch's loss is scaled
//        by 1 / (micro-batches of this rank in the step).
//   send_* / recv_*   activations and their gradients between pipeline stages over the
//        world group (blocking receives, asynchronous sends), paired in program order.
//   all_reduce / all_gather / reduce_scatter on
//        tensor     the layers' own collectives (the layer plan's conjugates: Megatron's
//                   f and g, or sequence parallelism's gathers and scatters, run inside
//                   the compute); the event shows, after the compute, their measured
//                   time and, as its count, the calls of its kind the compute made (an
//                   asynchronous one gets them at its wait; with tp_comm_overlap the
//                   wait's event also takes, from the compute's, the time the chunked
//                   GEMM waited on the collectives beside it); the one without a
//                   micro-batch, before the optimizer, sums the sequence-parallel
//                   replicated parameters' gradients;
//        data       gradient buckets (one per layer, overlapped with the backward of the
//                   layers below), or with optimizer-state sharding their reduce-scatter
//                   and the final all-gather of the updated parameters;
//        sharded    per-layer parameter all-gather before use (freed after) and gradient
//                   reduce-scatter after each backward;
//        replica    the shard's gradient across sharded groups;
//        embedding  the two copies of a tied embedding (first and last stage).
//   offload / reload  the checkpointed input to host memory and back (a real copy on CPU
//        too, so the path runs).
//   wait        completes an asynchronous instruction.
//   optimizer_step  Adam or SGD on what this rank owns (its parameters, or its slices).
// Gradients are averaged over the data-parallel degree, so a step equals the
// single-process step on the whole batch.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/communicators.hpp"
#include "partune/backend/gpt_model.hpp"
#include "partune/backend/mixed_precision_optimizer.hpp"
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
  bool has_loss = false;  // this rank runs the LM head
  double loss = 0;        // mean over its micro-batches of each one's mean token loss
  int microbatches = 0;
  // Tensor-parallel calls the layers made that no tensor instruction of the program
  // stands for (by micro-batch, chunk, layer and kind): 0 when the program and the
  // layers agree.
  int unbooked_tensor_calls = 0;
};

class ProgramExecutor {
 public:
  // `job` is the job the program was built from (with the model that runs); `model` is
  // this rank's shard of it; `comms` may be null for a world of one.
  ProgramExecutor(const Job& job, RankProgram program, GPTModel model, const OptimizerSettings& optimizer,
                  const Communicators* comms = nullptr);
  ~ProgramExecutor();
  ProgramExecutor(const ProgramExecutor&) = delete;
  ProgramExecutor& operator=(const ProgramExecutor&) = delete;

  // One training step: data[i] is this rank's micro-batch i of the step (in the program's
  // micro-batch numbering). Appends an event per executed instruction to `events` when
  // given (times relative to `t0`; streams as the simulator's).
  StepOutcome run(const std::vector<MicroBatchData>& data, std::vector<TraceEvent>* events = nullptr, double t0 = 0);

  const RankProgram& program() const;
  // This rank's training state (its parameters or parameter slices and the optimizer's
  // state), for sharded checkpoints.
  void save(torch::serialize::OutputArchive& archive);
  void load(torch::serialize::InputArchive& archive);

  // The executor's state and steps: backend/runtime/src/executor_state.hpp (not installed).
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Seconds on a monotonic clock (what event times are measured with).
double monotonic_seconds();

}  // namespace partune::backend
