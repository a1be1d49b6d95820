#pragma once
// The expert group's token exchange as the job's dispatcher runs it, for the estimator and
// the simulator alike (program.hpp's program_collective_phases hands it the simulator's
// expert all-to-alls): NCCL's grouped send/receive pairs (collective.hpp's all_to_all
// pattern) for the alltoall and allgather dispatchers, node-aware (node_aware_exchange_phases)
// over the nodes the model's routing reaches (expert_routing.hpp) for deepep.
#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/job.hpp"

namespace partune {

// The exchange of `bytes` (a member's routed copies) over an expert group of `span`.
CollectivePhases expert_exchange_phases(const Job& job, double bytes, const GroupSpan& span);

}  // namespace partune
