#include "partune/costmodel/expert_exchange.hpp"

#include "partune/costmodel/expert_routing.hpp"

namespace partune {

CollectivePhases expert_exchange_phases(const Job& job, double bytes, const GroupSpan& span) {
  const InstanceType& inst = job.cluster.instance;
  if (job.parallel.moe_token_dispatcher != MoeDispatcher::deepep)
    return collective_phases(CollectiveKind::all_to_all, CollectiveAlgorithm::ring, bytes, span, inst);
  return node_aware_exchange_phases(bytes, job.model.experts_per_token, remote_nodes_reached(job.model, span.nodes),
                                    span, inst);
}

}  // namespace partune
