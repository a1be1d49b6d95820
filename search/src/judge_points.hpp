#pragma once
// Private to search/: tier 1 of the search, every legal point of the space through the
// estimator, memory first (most points cannot fit, and those need no step time), on
// several threads. The verdicts come back in the points' order, so the search's output
// does not depend on the thread count.
#include <functional>
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/search/space.hpp"

namespace partune::search {

struct PointVerdict {
  bool fits = false;     // fits the GPU (estimate_memory) and stays under the memory limit
  double peak_bytes = 0;
  double step_time = 0;  // estimated, when it fits
};

// `threads` <= 0: one per core. `progress(done)` is called now and then from the calling
// thread.
std::vector<PointVerdict> judge_points(const Job& base, const std::vector<Point>& points, double memory_limit,
                                       int threads, const std::function<void(long done)>& progress);

}  // namespace partune::search
