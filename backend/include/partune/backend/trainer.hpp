#pragma once
// What `partune run` drives: from a job and run options, the scaled model, the optimizer,
// the tokens and the rank's program (layer granularity); step() runs one training step.
// No LibTorch in this header (the CLI includes it without compiling LibTorch headers).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "partune/backend/events.hpp"
#include "partune/backend/scaling.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program.hpp"

namespace partune::backend {

struct RunOptions {
  ScaleOptions scale;
  std::uint64_t seed = 1234;  // model initialisation and tokens
  std::string data_file;      // empty: synthetic tokens
  double learning_rate = 0;   // 0: 1e-3 for Adam, 0.1 for SGD
  int threads = 1;            // LibTorch intra-op threads (local-cpu: one core per rank)
  bool record_events = false;
};

struct StepReport {
  int step = 0;          // 1-based
  double loss = 0;       // mean token loss of the step's batch, before its update
  double seconds = 0;    // wall-clock time of the step
  double samples_per_s = 0;
};

// Why a job cannot run in this process (empty when it can): world size > 1 for now.
std::string why_not_runnable(const Job& job);

class Trainer {
 public:
  // Throws std::runtime_error when why_not_runnable(job) is not empty, and
  // UnsupportedInstruction (executor.hpp) when the program has instructions the executor
  // cannot run yet.
  Trainer(const Job& job, const RunOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  StepReport step();

  const Job& job() const;                 // the job with the scaled model
  const BackendModelConfig& model() const;
  const RankProgram& program() const;
  std::string data_description() const;
  std::string optimizer_description() const;
  // Events recorded so far (record_events), times in seconds since construction.
  const std::vector<ExecutedEvent>& events() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace partune::backend
