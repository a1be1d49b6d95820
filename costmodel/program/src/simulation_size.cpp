#include "partune/costmodel/simulation_size.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/program_builder.hpp"

namespace partune {

double instructions_per_rank(const Job& job, Granularity granularity) {
  const ParallelConfig& pc = job.parallel;
  const double microbatches = static_cast<double>(pc.microbatches) * job.training.gradient_accumulation;
  const double chunks = std::max(1, pc.virtual_stages);
  double layers_per_chunk = static_cast<double>(job.model.layers) / std::max(1, pc.pipeline_parallel_degree) / chunks;
  for (int l : pc.stage_layers) layers_per_chunk = std::max(layers_per_chunk, static_cast<double>(l));
  layers_per_chunk = std::max(1.0, layers_per_chunk);
  // A layer's forward and backward with its gathers, tensor collectives, copies and waits
  // is at most kPerLayer instructions; a chunk's, with its pipeline sends and receives, kPerChunk.
  constexpr double kPerLayer = 24, kPerChunk = 16, kPerBucketLayer = 12, kStep = 32;
  // Every backward runs layer by layer with sharded data parallelism, or with gradient
  // sharding (each micro-batch's buckets).
  const bool per_layer = granularity == Granularity::layer || pc.sharded_data_parallel_degree > 1 ||
                         (pc.shard_gradients && job.data_context_degree() > 1);
  if (per_layer) return microbatches * chunks * (kPerLayer * layers_per_chunk + kPerChunk) + kStep;
  // Chunk granularity: whole chunks, but the last backward of each chunk runs layer by
  // layer when gradients are synchronised in buckets.
  return microbatches * chunks * kPerChunk + chunks * layers_per_chunk * kPerBucketLayer + kStep;
}

SimulationSize simulation_size(const Job& job, double simulated_ranks, Granularity granularity, bool record_events) {
  SimulationSize s;
  s.ranks = simulated_ranks;
  s.instructions = simulated_ranks * instructions_per_rank(job, granularity);
  s.events = record_events ? s.instructions : 0;
  s.bytes = s.instructions * kBytesPerInstruction + s.ranks * kBytesPerRank + s.events * sizeof(TraceEvent);
  return s;
}

double simulation_memory_limit() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 4.0 * (1 << 30);  // unknown: 4 GiB
  return 0.5 * static_cast<double>(pages) * static_cast<double>(page);
}

void check_simulation_size(const Job& job, const SimulationSize& size, double limit_bytes, const std::string& hint) {
  const double GiB = 1 << 30;
  if (size.ranks > kMaxSimulatedRanks)
    throw ScenarioError(job.name, "", fmt::format("a simulation of {:.0f} ranks is too large (the limit is {:.0f}); {}",
                                                  size.ranks, kMaxSimulatedRanks, hint));
  if (size.bytes > limit_bytes)
    throw ScenarioError(job.name, "",
                        fmt::format("the simulation would hold {:.3g} instructions on {:.0f} ranks, about {:.3g} GiB; "
                                    "the limit is {:.3g} GiB (half of this machine's memory); {}",
                                    size.instructions, size.ranks, size.bytes / GiB, limit_bytes / GiB, hint));
}

}  // namespace partune
