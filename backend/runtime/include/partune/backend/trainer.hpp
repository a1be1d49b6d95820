#pragma once
// What `partune run` drives on one rank: from a job and run options, the scaled model
// (this rank's shard of it), the optimizer, the tokens, the rank's program (layer
// granularity) and, with more than one rank, the rendezvous, the process groups and the
// watchdog; step() runs one training step. No LibTorch in this header (the CLI includes
// it without compiling LibTorch headers).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "partune/backend/launcher.hpp"
#include "partune/costmodel/scaled_job.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program.hpp"

namespace partune::backend {

// Where the ranks compute (compute_device.hpp): the CPU in fp32, or a CUDA device in the
// job's training precision.
enum class DeviceKind { cpu, cuda };

struct RunOptions {
  ScaleOptions scale;
  DeviceKind device = DeviceKind::cpu;
  std::uint64_t seed = 1234;  // model initialisation and tokens
  std::string data_file;      // empty: synthetic tokens
  double learning_rate = 0;   // 0: 1e-3 for Adam, 0.1 for SGD
  int threads = 0;            // LibTorch intra-op threads; 0: cores / local ranks
  bool record_events = false;
  // This process's place in a multi-rank run (RANK, WORLD_SIZE, ... or the supervisor);
  // nullopt: a world of one, in this process.
  std::optional<RankEnvironment> environment;
  int collective_timeout_s = 120;  // a peer that stops answering becomes an error
};

struct StepReport {
  int step = 0;          // 1-based, counted from the start of training (across resumes)
  double loss = 0;       // mean token loss of the step's whole batch, before its update
  double seconds = 0;    // wall-clock time of the step (the slowest rank's)
  double samples_per_s = 0;
  std::vector<double> peak_bytes;  // per rank: peak tensor bytes on its device during the step
};

// Why the job cannot run as asked (empty when it can): the scaled model's shapes against
// the tensor degree, the batch split, the world size against the environment, and every
// rank's program against what the executor runs. Checked before any rank starts.
std::string why_not_runnable(const Job& job, const RunOptions& options);

// Why `--resume DIR` cannot continue this run (empty when it can): no checkpoint in DIR,
// an unreadable one, or one saved with another layout (degrees, stages, model shapes,
// optimizer), named with the layout it holds and this run's. Checked by the launcher
// before any rank starts.
std::string why_not_resumable(const Job& job, const RunOptions& options, const std::string& dir);

class Trainer {
 public:
  // Throws std::runtime_error when why_not_runnable is not empty. With an environment,
  // joins the rendezvous (blocking until every rank has).
  Trainer(const Job& job, const RunOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One step on every rank (a collective call: all ranks call it together).
  StepReport step();
  // Writes this rank's state into DIR's checkpoint of the current step; rank 0 commits
  // it once every rank has written (atomic: a crash leaves the previous one). Collective.
  void save(const std::string& dir);
  // Loads the latest checkpoint in DIR (written by the same layout); the next step()
  // continues from it. Collective. Returns the step it resumes after.
  int resume(const std::string& dir);
  // The end of the run: waits for every rank, then stops the watchdog. Collective.
  void finish();

  int rank() const;
  int world_size() const;
  const Job& job() const;  // the job as it runs: its model scaled (scaled_job)
  const RankProgram& program() const;
  std::string data_description() const;
  std::string optimizer_description() const;
  // "LibTorch 2.11.0, cuda:0 bf16 (NVIDIA H200), nccl": where the rank computes, in which
  // format, and which c10d implementation connects the ranks.
  std::string device_description() const;
  int threads() const;
  // Events recorded so far (record_events), times in seconds since construction; on
  // rank 0 after finish(), every rank's.
  const std::vector<TraceEvent>& events() const;

 private:
  StepReport run_step();
  void save_checkpoint(const std::string& dir);
  void finish_run();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace partune::backend
