// build/partune-run: `partune run`, `partune calibrate` and `partune bench attention`, the
// commands that need LibTorch.
// `partune run ...` / `partune calibrate ...` start this executable with the same
// arguments (see main.cpp), so LibTorch loads only for them.
#include "command_line.hpp"
#include "commands.hpp"
#include "partune/backend/memory_accounting.hpp"

int main(int argc, char** argv) {
  // Before any LibTorch thread exists: the allocator is swapped without a lock.
  partune::backend::install_cpu_memory_accounting();
  CLI::App app{"partune run: train the job for real on the LibTorch backend"};
  app.require_subcommand(1);
  partune::cli::describe_program(app);  // before the commands: they inherit its exit-status table
  partune::cli::register_run(app);
  partune::cli::register_calibrate(app);
  partune::cli::register_bench_attention(app);
  return partune::cli::run_command_line(app, argc, argv);
}
