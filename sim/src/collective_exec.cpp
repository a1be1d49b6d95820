#include "collective_exec.hpp"

#include <cstdint>
#include <vector>

namespace partune::sim {

namespace s4u = simgrid::s4u;

namespace {

// A flow of `bytes` from `host` to `successor`: through the successor's mailbox when it
// has one (its actor receives eagerly), else host to host.
s4u::CommPtr start_flow(s4u::Host* host, s4u::Host* successor, s4u::Mailbox* mailbox, double bytes) {
  static int token = 0;  // the payload is only its size
  if (mailbox) return mailbox->put_async(&token, static_cast<uint64_t>(bytes));
  return s4u::Comm::sendto_async(host, successor, static_cast<uint64_t>(bytes));
}

}  // namespace

long send_collective_phases(s4u::Host* host, const PhaseTargets& to, const CollectiveTraffic& traffic, double count,
                            double nic_share) {
  long flows_started = 0;
  for (int ph = 0; ph < traffic.phase_count; ++ph) {
    std::vector<s4u::CommPtr> flows;
    const double intra = traffic.phases[ph].intra_bytes * count, net = traffic.phases[ph].net_bytes * count;
    if (intra > 0 && to.intra_successor) flows.push_back(start_flow(host, to.intra_successor, to.intra_mailbox, intra));
    if (net > 0 && to.net_successor)
      flows.push_back(start_flow(host, to.net_successor, to.net_mailbox, net * nic_share));
    if (!flows.empty()) s4u::Comm::wait_all(flows);
    flows_started += static_cast<long>(flows.size());
  }
  return flows_started;
}

void configure_engine(std::size_t ranks) {
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
  // A guard page under each actor's stack splits its mapping in three; past about 20,000
  // actors that exceeds Linux's default vm.max_map_count (65,530) and SimGrid aborts.
  if (ranks > kGuardedRanks) s4u::Engine::set_config("contexts/guard-size:0");
#endif
}

}  // namespace partune::sim
