// build/partune-run: `partune run`, on the LibTorch backend. `partune run ...` starts this
// executable with the same arguments (see main.cpp), so LibTorch loads only for `run`.
#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"partune run: train the job for real on the LibTorch backend"};
  app.require_subcommand(1);
  partune::cli::register_run(app);
  return partune::cli::run_app(app, argc, argv);
}
