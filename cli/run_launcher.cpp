// The launcher side of `partune run` (run_launcher.hpp).
#include "run_launcher.hpp"

#include <iostream>

#include <fmt/format.h>

#include "commands.hpp"
#include "partune/backend/checkpoint_directory.hpp"
#include "partune/backend/launcher.hpp"

namespace partune::cli {

namespace {

// What an interrupted save left in the --save and --resume directories goes before any
// rank starts (with a note).
void tidy_checkpoint_directories(const RunCommand& opt) {
  for (const std::string& dir : {opt.save, opt.resume})
    if (!dir.empty())
      for (const std::string& name : backend::remove_interrupted_save_leftovers(dir))
        std::cerr << fmt::format("partune run: removed {}/{}, left by an interrupted save\n", dir, name);
}

}  // namespace

// Without a launcher's environment this process is the launcher: it checks everything
// before any rank starts, then starts and supervises --nproc local ranks (true: they have
// run). With one rank, or as a rank of a launcher's world, it runs the rank itself (false).
bool supervised_ranks(const Job& job, RunCommand& opt) {
  opt.run.environment = backend::rank_environment_from_env();
  if (!opt.run.environment) {
    // This process is the launcher: check everything before any rank starts.
    const int nproc = opt.nproc > 0 ? opt.nproc : job.world_size();
    if (nproc != job.world_size()) {
      std::cerr << fmt::format("partune: error: --nproc {} but job '{}' has world size {} (pipeline {} x tensor {} x data {})\n",
                               nproc, job.name, job.world_size(), job.parallel.pipeline_parallel_degree,
                               job.parallel.tensor_parallel_degree, job.data_parallel_degree());
      throw Exit{2};
    }
    backend::RunOptions check = opt.run;
    if (nproc > 1) {
      check.environment = backend::RankEnvironment{};
      check.environment->world_size = nproc;
    }
    if (const std::string why = backend::why_not_runnable(job, check); !why.empty()) {
      std::cerr << "partune: error: " << why << "\n";
      throw Exit{2};
    }
    tidy_checkpoint_directories(opt);
    if (!opt.resume.empty())
      if (const std::string why = backend::why_not_resumable(job, check, opt.resume); !why.empty()) {
        std::cerr << "partune: error: " << why << "\n";
        throw Exit{2};
      }
    if (nproc > 1) {
      backend::SuperviseOptions so;
      so.executable = backend::current_executable_path();
      const int status = backend::supervise_local_ranks(backend::current_arguments(), nproc, so);
      if (status != 0) throw Exit{status == 2 ? 2 : 1};  // a rank died: 1 (bad input the ranks found: 2)
      return true;
    }
  } else if (opt.nproc > 0 && opt.nproc != opt.run.environment->world_size &&
             opt.run.environment->store_hosted_by_launcher == false) {
    std::cerr << "partune: error: --nproc is for starting local ranks; this process is already rank "
              << opt.run.environment->rank << " of a launcher's world\n";
    throw Exit{2};
  } else if (opt.run.environment->hosts_store()) {
    tidy_checkpoint_directories(opt);  // rank 0 of an external launcher, before the rendezvous
  }
  return false;
}

}  // namespace partune::cli
