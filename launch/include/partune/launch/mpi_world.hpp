#pragma once
// Splitting work over MPI ranks: `mpirun -n N partune sweep ...` (each rank evaluates a
// share of the points) and `mpirun -n N partune search ...` (each rank simulates a share
// of the candidates; every rank then ranks them all alike). Rank 0 prints and writes;
// the output is the single-process output, byte for byte. Open MPI from Debian, optional
// at configure time: without it, or outside mpirun (no OMPI_COMM_WORLD_SIZE or PMI_SIZE
// in the environment), the world is this process alone.
#include <string>
#include <vector>

#include "partune/search/tuner.hpp"

namespace partune::launch {

struct MpiWorld {
  int rank = 0, size = 1;
  bool mpi = false;  // started by mpirun (its runtime's threads: no forking here)
  bool prints() const { return rank == 0; }
};

// Initialises MPI once when started by mpirun (and finalises it at exit).
MpiWorld mpi_world();

// Every rank's `mine`, in rank order, on every rank; {mine} alone outside MPI.
std::vector<std::string> mpi_all_gather(const std::string& mine);

// search's simulations split over the ranks: rank r simulates candidates r, r + size, ...
// (sim::simulate_each over its workers) and every rank gets every outcome in order.
// Each simulation runs in a fresh partune process (the hidden `simulate-outcome`
// command, which prints simulated_outcome): MPI's runtime threads forbid forking here.
search::SearchOptions::SimulateBatch mpi_simulate_batch(const MpiWorld& world);
// The same, each rank for its own searches alone (sweep --search under MPI).
search::SearchOptions::SimulateBatch spawned_simulate_batch();
// One job file simulated, encoded (sim::encode_outcome) for the process that spawned this
// one; a job that fails to load or simulate is an outcome with its error, not a throw.
std::string simulated_outcome(const std::string& job_file);

}  // namespace partune::launch
