#include "collective_exec.hpp"

#include <cstdint>
#include <vector>

namespace partune::sim {

namespace s4u = simgrid::s4u;

long send_collective_phases(s4u::Host* host, s4u::Host* intra_successor, s4u::Host* net_successor,
                            const CollectiveTraffic& traffic, double count, double nic_share) {
  long flows_started = 0;
  for (int ph = 0; ph < traffic.phase_count; ++ph) {
    std::vector<s4u::CommPtr> flows;
    const double intra = traffic.phases[ph].intra_bytes * count, net = traffic.phases[ph].net_bytes * count;
    if (intra > 0 && intra_successor)
      flows.push_back(s4u::Comm::sendto_async(host, intra_successor, static_cast<uint64_t>(intra)));
    if (net > 0 && net_successor)
      flows.push_back(s4u::Comm::sendto_async(host, net_successor, static_cast<uint64_t>(net * nic_share)));
    if (!flows.empty()) s4u::Comm::wait_all(flows);
    flows_started += static_cast<long>(flows.size());
  }
  if (traffic.latency > 0) s4u::this_actor::sleep_for(traffic.latency * count);
  return flows_started;
}

void configure_engine() {
  s4u::Engine::set_config("network/model:CM02");
  s4u::Engine::set_config("network/TCP-gamma:0");
  s4u::Engine::set_config("network/crosstraffic:0");
#if defined(__SANITIZE_ADDRESS__)
  // Under AddressSanitizer (scripts/sanitize.sh) every actor runs on a thread of its own:
  // SimGrid's default contexts switch stacks behind ASan's back (Debian's SimGrid is not
  // built with its ASan support), which ASan reports as overflows that are not there.
  s4u::Engine::set_config("contexts/factory:thread");
  s4u::Engine::set_config("contexts/stack-size:1024");
#else
  s4u::Engine::set_config("contexts/stack-size:128");
#endif
}

}  // namespace partune::sim
