#pragma once
// The size gate: how much a simulation of a job will hold (ranks, instructions, trace
// events, memory), computed from the job before any program is built, and the check
// that refuses one too large for this machine with the figure and the limit.
#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program_builder.hpp"

namespace partune {

struct SimulationSize {
  double ranks = 0;         // simulated ranks
  double instructions = 0;  // of all their programs (an upper bound of build_program's)
  double events = 0;        // trace events kept (0 unless recording)
  double bytes = 0;         // memory the simulation needs, estimated
};

// An upper bound of the instructions in one rank's program (build_program's loops:
// per micro-batch and chunk, or per layer too at layer granularity and with sharding,
// plus the gradient buckets of the last backward). Within a small factor of the real count.
double instructions_per_rank(const Job& job, Granularity granularity);

// The size of a simulation of `simulated_ranks` ranks of `job` (the symmetry rules
// decide how many; sim/ knows them). Memory: kBytesPerInstruction per instruction,
// kBytesPerRank per rank, and each kept trace event. Measured (docs/performance.md):
// GPT-3 175B's programs, about 1,200 instructions a rank, peak at 100-110 KB a rank in
// all from 2,048 to 65,536 GPUs; the bound below is 180 KB for them.
constexpr double kBytesPerInstruction = 96;
constexpr double kBytesPerRank = 64 << 10;
SimulationSize simulation_size(const Job& job, double simulated_ranks, Granularity granularity, bool record_events);

// The most memory a simulation may need: half of this machine's physical memory.
double simulation_memory_limit();
// At most this many ranks are ever simulated (the platform holds one host per rank).
constexpr double kMaxSimulatedRanks = 1 << 20;

// ScenarioError (file: the job's name) when `size` exceeds `limit_bytes` or
// kMaxSimulatedRanks, with both figures and `hint` (what to do instead).
void check_simulation_size(const Job& job, const SimulationSize& size, double limit_bytes, const std::string& hint);

}  // namespace partune
