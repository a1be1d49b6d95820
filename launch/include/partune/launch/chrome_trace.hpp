#pragma once
// Chrome trace-event files (Perfetto, chrome://tracing): one process per node, one
// thread per rank and stream, one complete event per executed instruction. Both sides
// write them (the simulator's prediction, the backend's measurement) and validate reads
// them back, all as the contract's TraceEvent (costmodel/program.hpp).
#include <string>
#include <vector>

#include "partune/costmodel/atomic_file.hpp"
#include "partune/costmodel/program.hpp"

namespace partune::launch {

// Writes atomically: the file appears whole or not at all (a temporary is renamed).
// args: rank, chunk, and microbatch, layer, group and count where they are not the
// defaults; the thread id is rank x 8 + stream.
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events, int gpus_per_node);
// The same into a file opened before the run (so that a bad path fails before any work),
// committed here.
void write_chrome_trace(AtomicFile& file, const std::vector<TraceEvent>& events, int gpus_per_node);

// Every complete ("X") event of a file write_chrome_trace wrote, in file order, times in
// seconds. Throws std::runtime_error naming the file, the event and what is wrong with it
// (an event name that is no instruction kind, an unknown communicator, a missing field).
std::vector<TraceEvent> read_chrome_trace(const std::string& path);

}  // namespace partune::launch
