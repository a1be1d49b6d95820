#pragma once
// Each sub-command registers itself on the app: flags, then a callback that loads
// scenarios, calls one library function and prints.
#include <CLI/CLI.hpp>

namespace partune::cli {

void register_estimate(CLI::App& app);
void register_reproduce(CLI::App& app);
void register_simulate(CLI::App& app);
void register_search(CLI::App& app);
void register_sweep(CLI::App& app);
// The internal command that runs one simulation for search under MPI (cmd_simulate_outcome.cpp).
void register_simulate_outcome(CLI::App& app);
void register_bench(CLI::App& app);
// `bench run`, under bench (cmd_bench_run.cpp).
void register_bench_run(CLI::App* bench);
void register_bench_simulate(CLI::App* bench);
// `bench collectives --compare` (cmd_bench_collectives.cpp).
void register_bench_collectives(CLI::App* bench);
// partune run: the LibTorch backend (built only when LibTorch is found).
void register_run(CLI::App& app);
// partune calibrate: measures this machine into an instance-type file (LibTorch; partune-run).
void register_calibrate(CLI::App& app);
// partune bench attention: standard vs FlashAttention (partune-run; cmd_bench_attention.cpp).
void register_bench_attention(CLI::App& app);
// partune validate: simulator against the LibTorch backend (cmd_validate.cpp).
void register_validate(CLI::App& app);

// Thrown by a command to end with this exit status after it printed its message.
struct Exit {
  int code;
};

}  // namespace partune::cli
