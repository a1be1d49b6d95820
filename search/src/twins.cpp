// Candidates the model cannot tell apart (twins.hpp).
#include "partune/search/twins.hpp"

#include <algorithm>
#include <cmath>

#include "partune/search/space.hpp"

namespace partune::search {

namespace {

bool same_figure(double a, double b) {
  return a == b || std::abs(a - b) <= kTwinRelativeTolerance * std::max(std::abs(a), std::abs(b));
}

}  // namespace

bool are_twins(const Candidate& a, const Candidate& b) {
  if (a.simulated != b.simulated) return false;
  if (!same_figure(a.estimate.step_time, b.estimate.step_time) ||
      !same_figure(a.estimate.memory.total(), b.estimate.memory.total()))
    return false;
  if (a.simulated && !same_figure(a.simulation.step_time, b.simulation.step_time)) return false;
  // The same configuration but for the placement order: `a` with b's order reads as b.
  Job a_placed_as_b = a.job;
  a_placed_as_b.parallel.placement_strategy = b.job.parallel.placement_strategy;
  return describe(a_placed_as_b) == describe(b.job);
}

std::vector<TwinGroup> group_twins(const std::vector<Candidate>& ranked) {
  std::vector<TwinGroup> groups;
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    const auto twin_group = std::find_if(groups.begin(), groups.end(), [&](const TwinGroup& g) {
      return are_twins(ranked[g.first], ranked[i]);
    });
    if (twin_group == groups.end()) groups.push_back(TwinGroup{i, {}});
    else twin_group->twins.push_back(i);
  }
  return groups;
}

}  // namespace partune::search
