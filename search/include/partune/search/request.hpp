#pragma once
// A search as a front end asks for it (`partune search`'s options, the Python module's
// arguments): restrictions on top of the job file's own search: section, filters whose
// pruned candidates will be explained, the estimator alone or the simulator too, and the
// tiers' options. A bad restriction or filter is a ScenarioError naming where it came
// from, raised before the (long) search.
#include <string>
#include <vector>

#include "partune/search/tuner.hpp"

namespace partune::search {

struct SearchRequest {
  std::vector<std::string> fix;      // --fix: key=value or key=v1,v2
  std::vector<std::string> explain;  // --explain filters (explain() reads them after the search)
  bool estimator_only = false;       // rank with the estimator alone (options.simulate off)
  bool uniform_stages = false;       // no automated partitioning (options.auto_partition off)
  SearchOptions options;
};

// The search of `base` (loaded from `origin`, which errors name) that `request` asks for.
SearchReport run_search(const Job& base, const std::string& origin, const SearchRequest& request);

}  // namespace partune::search
