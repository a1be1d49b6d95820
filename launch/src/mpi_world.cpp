// MPI ranks for sweep and search (mpi_world.hpp).
#include "partune/launch/mpi_world.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>

#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/launch/process_spawn.hpp"

#ifdef PARTUNE_HAVE_MPI
#include <mpi.h>
#endif

namespace partune::launch {

namespace {

bool launched_by_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE"); }

// Length-prefixed strings in one buffer, and back.
std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += std::to_string(p.size()) + ":" + p;
  return out;
}
std::vector<std::string> unpack(const std::string& packed) {
  std::vector<std::string> out;
  for (std::size_t at = 0; at < packed.size();) {
    const std::size_t colon = packed.find(':', at);
    const std::size_t n = std::stoul(packed.substr(at, colon - at));
    out.push_back(packed.substr(colon + 1, n));
    at = colon + 1 + n;
  }
  return out;
}

}  // namespace

MpiWorld mpi_world() {
  MpiWorld w;
#ifdef PARTUNE_HAVE_MPI
  if (!launched_by_mpirun()) return w;
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised) {
    MPI_Init(nullptr, nullptr);
    std::atexit([] { MPI_Finalize(); });
  }
  w.mpi = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
#else
  (void)launched_by_mpirun;
#endif
  return w;
}

std::vector<std::string> mpi_all_gather(const std::string& mine) {
  const MpiWorld w = mpi_world();
  if (w.size == 1) return {mine};
#ifdef PARTUNE_HAVE_MPI
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(w.size), offsets(w.size);
  MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < w.size; ++r) offsets[r] = total, total += lengths[r];
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> out;
  for (int r = 0; r < w.size; ++r) out.push_back(all.substr(offsets[r], lengths[r]));
  return out;
#else
  throw std::logic_error("mpi_all_gather: a world of several ranks without MPI");
#endif
}

// One simulation in a fresh partune process (`partune simulate-outcome FILE`): MPI's
// runtime runs threads, so this process must not fork a simulation itself.
sim::SimOutcome simulate_spawned(const Job& job) {
  const TemporaryFile file(".yaml", job_yaml(job, "a candidate of partune search under MPI"));
  const CliResult r = run_program("/proc/self/exe", {"simulate-outcome", file.path()});
  if (r.status == 0) return sim::decode_outcome(r.out);
  sim::SimOutcome failed;
  failed.error = r.err.empty() ? "its process exited with status " + std::to_string(r.status) : r.err;
  return failed;
}

search::SearchOptions::SimulateBatch mpi_simulate_batch(const MpiWorld& world) {
  return [world](const std::vector<Job>& jobs, const sim::SimOptions&, int,
                 const std::function<void(std::size_t)>& on_done) {
    std::vector<std::string> encoded;
    for (std::size_t i = world.rank; i < jobs.size(); i += world.size) {
      encoded.push_back(sim::encode_outcome(simulate_spawned(jobs[i])));
      if (on_done) on_done(encoded.size());
    }
    const std::vector<std::string> every = mpi_all_gather(pack(encoded));
    std::vector<sim::SimOutcome> out(jobs.size());
    for (int r = 0; r < world.size; ++r) {
      const std::vector<std::string> theirs = unpack(every[r]);
      for (std::size_t k = 0; k < theirs.size(); ++k) out[r + k * world.size] = sim::decode_outcome(theirs[k]);
    }
    return out;
  };
}

search::SearchOptions::SimulateBatch spawned_simulate_batch() {
  return [](const std::vector<Job>& jobs, const sim::SimOptions&, int, const std::function<void(std::size_t)>& on_done) {
    std::vector<sim::SimOutcome> out;
    for (const Job& job : jobs) {
      out.push_back(simulate_spawned(job));
      if (on_done) on_done(out.size());
    }
    return out;
  };
}

std::string simulated_outcome(const std::string& job_file) {
  sim::SimOutcome o;
  try {
    o.result = sim::simulate(load_job(job_file));
    o.ok = true;
  } catch (const std::exception& e) {
    o.error = e.what();
  }
  return sim::encode_outcome(o);
}

}  // namespace partune::launch
