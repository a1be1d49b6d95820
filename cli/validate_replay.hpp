#pragma once
// `partune validate --replay DIR`: the GPU runs on record predicted again and compared
// (validate/replay.hpp), printed as a table a job per line and a category per line, or
// as one JSON object. Exit 1 when a step misses its target (bf16 10%, fp8 15%) or a
// profiled kernel category misses 20%.
#include <string>

namespace partune::cli {

void validate_replay(const std::string& dir, bool json);

}  // namespace partune::cli
