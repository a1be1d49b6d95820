#pragma once
// Chrome trace-event files (Perfetto, chrome://tracing): one process per node, one
// thread per rank and stream, one complete event per executed instruction.
#include <string>
#include <vector>

#include "partune/costmodel/program.hpp"

namespace partune::cli {

// Writes atomically: the file appears whole or not at all (a temporary is renamed).
void write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events,
                        int gpus_per_node);

}  // namespace partune::cli
