#pragma once
// The launcher side of `partune run`: without a launcher's environment (RANK, WORLD_SIZE,
// ...) this process checks the job and everything it names before any rank starts, then
// starts and supervises --nproc local ranks (backend/launcher.hpp), each of which is this
// same command started again with that environment. No LibTorch header.
#include <string>
#include <vector>

#include "partune/backend/trainer.hpp"
#include "partune/costmodel/job.hpp"

namespace partune::cli {

// partune run's options.
struct RunCommand {
  std::string job, trace, data, save, resume;
  std::string device = "cpu";
  std::vector<std::string> overrides;
  int steps = 10;
  int nproc = 0;
  bool json = false;
  backend::RunOptions run;
};

// True when this process launched and supervised the ranks (they have run); false when
// it is to run a rank itself (one rank, or a rank of a launcher's world). Sets
// opt.run.environment. Bad input or a rank that died: Exit with its status.
bool supervised_ranks(const Job& job, RunCommand& opt);

}  // namespace partune::cli
