// The expert grid (expert_grid.hpp).
#include "partune/costmodel/expert_grid.hpp"

#include <algorithm>

namespace partune {

std::vector<int> expert_grid_group(const Job& job, const Placement& placement, int rank, ExpertAxis axis) {
  if (!job.model.is_moe()) return {rank};
  const int t = std::max(1, job.parallel.tensor_parallel_degree);
  const int etp = job.expert_tensor_degree(), ep = std::max(1, job.parallel.expert_parallel_degree);
  const int edp = job.expert_data_parallel_degree();
  const RankCoords at = placement.coords(rank);
  const int f = at.tensor + t * at.data;
  // This rank's place on the grid, and the step and count of the axis's members.
  const int block = etp * ep;
  int first = f % block, step = block, count = edp;  // expert_data
  switch (axis) {
    case ExpertAxis::expert_tensor: first = f / etp * etp, step = 1, count = etp; break;
    case ExpertAxis::expert: first = f % etp + f / block * block, step = etp, count = ep; break;
    case ExpertAxis::expert_block: first = f / block * block, step = 1, count = block; break;
    case ExpertAxis::expert_data: break;
  }
  std::vector<int> out;
  out.reserve(count);
  for (int i = 0; i < count; ++i) {
    const int g = first + i * step;
    RankCoords c = at;
    c.tensor = g % t;
    c.data = g / t;
    out.push_back(placement.rank(c));
  }
  return out;
}

}  // namespace partune
