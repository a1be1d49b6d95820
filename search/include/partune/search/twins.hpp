#pragma once
// Twins in a ranking: candidates the model cannot tell apart. Two candidates are twins
// when their configurations differ only in the placement order of the axes (DPT, PDT,
// ...) and every figure the model gives them is the same: the estimated step time and
// peak memory, and the simulated step time where both were simulated. That happens when
// the orders put every communication group on the same number of nodes with the same
// members per node (e.g. tp8 on 8-GPU nodes: PDT and DPT both give one node per tensor
// group and one member per node to every data and pipeline group), so the cost model
// sees the same job. A report shows one row per group of twins.
#include <cstddef>
#include <vector>

#include "partune/search/tuner.hpp"

namespace partune::search {

// Figures are "the same" to this relative difference (the estimator is deterministic, so
// twins agree to the last bit; the margin covers the simulator's event order).
constexpr double kTwinRelativeTolerance = 1e-9;

bool are_twins(const Candidate& a, const Candidate& b);

// One distinct configuration of a ranking and its twins.
struct TwinGroup {
  std::size_t first = 0;           // index in the ranking of the one to show (the best placed)
  std::vector<std::size_t> twins;  // indices of its twins, in ranking order
};

// The ranking (best first) as distinct configurations, in ranking order: a candidate joins
// the first earlier group whose shown candidate it is a twin of.
std::vector<TwinGroup> group_twins(const std::vector<Candidate>& ranked);

}  // namespace partune::search
