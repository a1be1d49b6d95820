// partune simulate-outcome JOB.yaml (internal, hidden): one simulation for a search split
// over MPI ranks, its outcome encoded on standard output (launch/mpi_world.hpp).
#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "partune/launch/mpi_world.hpp"

namespace partune::cli {

void register_simulate_outcome(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate-outcome", "")->group("");  // internal: search under MPI
  auto file = std::make_shared<std::string>();
  cmd->add_option("job", *file)->required();
  cmd->callback([file] {
    const std::string bytes = launch::simulated_outcome(*file);
    std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  });
}

}  // namespace partune::cli
