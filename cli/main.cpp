// partune: how should this model be split across these machines, and how fast will it train?
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "partune/launch/backend_process.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "partune/costmodel/error.hpp"

namespace {

// `partune run` lives in its own executable beside this one (build/partune-run), so the
// other commands neither load LibTorch (half a second at every start) nor fork with it
// mapped. Returns only if that executable cannot be started.
int exec_run(int argc, char** argv) {
  const std::string runner = partune::launch::runner_path();
  if (::access(runner.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "partune: error: %s needs the LibTorch backend, and this build has none (LibTorch was not found "
                 "when it was configured; scripts/setup.sh installs libtorch-dev)\n",
                 argv[1]);
    return partune::cli::kBadInput;
  }
  std::vector<char*> args{argv[0]};  // help and errors keep naming the command the user typed
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  ::execv(runner.c_str(), args.data());
  std::fprintf(stderr, "partune: error: cannot start %s: %s\n", runner.c_str(), std::strerror(errno));
  return partune::cli::kFailedRun;
}

}  // namespace

int main(int argc, char** argv) {
  // calibrate benchmarks LibTorch's kernels: it lives beside run, in partune-run.
  if (argc > 1 && (std::strcmp(argv[1], "run") == 0 || std::strcmp(argv[1], "calibrate") == 0))
    return exec_run(argc, argv);
  // bench attention times LibTorch kernels: partune-run too.
  if (argc > 2 && std::strcmp(argv[1], "bench") == 0 && std::strcmp(argv[2], "attention") == 0)
    return exec_run(argc, argv);
  CLI::App app{"partune: simulate, search and run parallel training configurations"};
  app.require_subcommand(1);
  partune::cli::describe_program(app);
  partune::cli::register_estimate(app);
  partune::cli::register_simulate(app);
  partune::cli::register_search(app);
  partune::cli::register_sweep(app);
  partune::cli::register_simulate_outcome(app);
  partune::cli::register_reproduce(app);
  partune::cli::register_bench(app);
  partune::cli::register_validate(app);
  // Listed for --help; the command itself runs in build/partune-run (see exec_run).
  app.add_subcommand("run", "Train the job for real on the LibTorch backend (partune run JOB.yaml --help)")
      ->allow_extras();
  app.add_subcommand("calibrate",
                     "Measure this machine into an instance-type file (partune calibrate --out FILE --help)")
      ->allow_extras();
  return partune::cli::run_command_line(app, argc, argv);
}
