#pragma once
// The builder of the per-rank programs (program.hpp's contract): for a job and a rank,
// the ordered instructions of one training step, from the layer plan's costs and the
// pipeline schedule (schedule.hpp). The simulator and the backend both execute what it
// builds.
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/job_costs.hpp"
#include "partune/costmodel/program.hpp"

namespace partune {

// chunk: one compute instruction per (micro-batch, chunk), tensor-parallel collectives
// folded into one instruction after it (same total, far fewer events: what large
// simulations use). layer: one instruction per layer, as the backend runs them.
// Sharded data parallelism always uses layer granularity (its gathers are per layer).
enum class Granularity { chunk, layer };
struct ProgramOptions {
  Granularity granularity = Granularity::chunk;
};

// Which parameters besides a layer's own travel in its gradient bucket (and its shard
// under sharded data parallelism): the embedding with layer 0 of the first model stage,
// the head with the last layer of the last model stage or, with the head on the first
// stage, with layer 0 too (its gradient is complete once every head step has run). The
// programs size their buckets by it and the backend fills them by it.
struct BucketExtras {
  bool embedding = false, head = false;
};
BucketExtras bucket_extras(const Job& job, int stage, int chunk, int layer);

// The Job forms build the job's costs (job_costs.hpp) once; a caller that holds them
// passes them (every rank's builder reads the same).
RankProgram build_program(const Job& job, int rank, const ProgramOptions& options = {});
RankProgram build_program(const JobCosts& costs, int rank, const ProgramOptions& options = {});
std::vector<RankProgram> build_programs(const Job& job, const ProgramOptions& options = {});
std::vector<RankProgram> build_programs(const JobCosts& costs, const ProgramOptions& options = {});

}  // namespace partune
