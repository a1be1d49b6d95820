#pragma once
// When no candidate fits: the closest ones, one per layout (the pipeline, tensor, context,
// expert and sharded degrees), ranked by the memory they lack, each with at most two
// changes that make it fit. A change is one the search does not make by itself (state
// offload and gradient sharding, which it tries only when asked; more nodes; a smaller
// headroom), written as the job key or option that asks for it, and each is checked by
// estimating the candidate with it: only changes that fit are offered.
#include <string>
#include <vector>

#include "partune/search/tuner.hpp"

namespace partune::search {

struct FitChange {
  // What to write in the job file ("parallel.offload_optimizer: true", "cluster.nodes: 16",
  // joined by " and "), and the same as --set arguments ("offload_optimizer=true"); or,
  // for a command-line option (--memory-headroom), `option` alone.
  std::string keys, set, option;
  double peak_bytes = 0;  // the candidate's estimated peak with the change
  double step_time = 0;   // and its estimated step, s
};

struct ClosestMiss {
  Job job;                       // the layout's candidate with the smallest estimated peak
  std::string configuration;     // describe(job)
  double peak_bytes = 0;         // its estimated peak
  double shortfall_bytes = 0;    // peak_bytes - SearchReport::memory_limit
  long variants = 0;             // pruned candidates with this layout, all over the limit
  // At most two alternatives, each alone enough, fastest first; or, when no one change is
  // enough, one pair applied together (`together`). Empty when nothing tried fits.
  std::vector<FitChange> changes;
  bool together = false;
};

// A job as written (estimate's) that does not fit in its GPU's HBM: at most two changes
// that each make it fit, fastest first, or one pair that does together (`together`);
// empty when none tried does. Besides the search's changes, the job's own knobs the search
// would turn: shard_optimizer_state, sharded_data_parallel_degree, full checkpointing,
// flash_attention.
std::vector<FitChange> changes_to_fit(const Job& job, bool* together = nullptr);

// The `groups` layouts whose best candidate lacks the least memory, that candidate
// first. Reads SearchReport::pruned (memory verdicts); empty when none was pruned for memory.
std::vector<ClosestMiss> closest_misses(const SearchReport& report, const Job& base, std::size_t groups = 3);

}  // namespace partune::search
