#pragma once
// The expert grid of a mixture of experts (Megatron-Core's MoE parallel folding, Liu et
// al. 2025, arXiv:2504.14960, §3.2): the expert layers take their own layout over the
// ranks of a pipeline stage, independent of the attention's. A stage's tensor x data
// ranks (the data axis holds data x context ranks) are flattened in Megatron's order,
// tensor fastest (f = tensor + t x data), and regrouped as expert-tensor ranks fastest,
// then expert ranks, then expert-data ranks (etp-ep-edp):
//   expert_tensor: the etp consecutive f that split each expert's width;
//   expert:        the ep members etp apart that exchange tokens (dispatch, combine);
//   expert_data:   the edp members etp x ep apart that hold the same experts and reduce
//                  their gradients;
//   expert_block:  the etp x ep consecutive f of one expert-data index (the allgather
//                  dispatcher's group: Megatron's tp_ep group).
// With etp equal to the tensor degree (Megatron's default) the expert-tensor group is the
// tensor group, an expert group is ep consecutive data-parallel ranks of one tensor
// index, and the expert-data group the same expert rank in each of them.
#include <vector>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune {

enum class ExpertAxis { expert_tensor, expert, expert_data, expert_block };

// The global ranks of `rank`'s group along `axis`, ordered by their place in it; {rank}
// for a dense model.
std::vector<int> expert_grid_group(const Job& job, const Placement& placement, int rank, ExpertAxis axis);

}  // namespace partune
