#pragma once
// Published configurations against the autotuner: for every table row whose job is a
// published configuration, search the same model, cluster, batch and precision, and
// compare the configuration found with the published one (both predicted the same way).
#include <string>
#include <vector>

#include "partune/costmodel/table.hpp"
#include "partune/search/tuner.hpp"

namespace partune::search {

struct PublishedComparison {
  std::string table, row;
  std::string published_configuration, found_configuration;
  double published_samples_per_s = 0;  // predicted
  double found_samples_per_s = 0;      // predicted
  bool published_fits = true;          // by the memory model
  bool simulated = false;              // both predicted by the simulator (else the estimator)
  bool found_at_least_as_fast() const { return found_samples_per_s >= published_samples_per_s * (1 - 1e-9); }
  // The search keeps to what fits: a published configuration the memory model says does
  // not fit is not one it could have chosen, so the row compares nothing.
  bool comparable() const { return published_fits; }
};

// Speedup rows (two jobs) are skipped. With options.simulate the published job is
// simulated too, so both sides are the simulator's.
std::vector<PublishedComparison> compare_with_published(const std::vector<Table>& tables, const SearchOptions& options);

}  // namespace partune::search
