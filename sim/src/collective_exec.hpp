#pragma once
// Private to sim/: how one member runs a collective's traffic (collective.hpp) on the
// simulated platform. Shared by World::execute_collective and simulate_collective(), so
// the agreement tests run the simulator's own code path.
#include <simgrid/s4u.hpp>

#include "partune/costmodel/collective.hpp"

namespace partune::sim {

// Runs the phases one after another from `host`: in each phase `intra_bytes x count` go
// to `intra_successor` and `net_bytes x count x nic_share` to `net_successor` (through
// the sender's NIC), both at once, and the phase ends when both have arrived; then the
// member sleeps `latency x count`. A null successor, or a phase without bytes for it,
// sends nothing on that level. `nic_share` > 1 carries the bytes of members not
// simulated that send the same amounts through the same NIC at the same moments.
// Returns the number of flows started.
long send_collective_phases(simgrid::s4u::Host* host, simgrid::s4u::Host* intra_successor,
                            simgrid::s4u::Host* net_successor, const CollectiveTraffic& traffic, double count,
                            double nic_share);

// SimGrid's settings for every simulation in this process (World::run and
// simulate_collectives): pure max-min sharing with no TCP corrections, so link shares are
// the model's, and latencies added by the collectives themselves (links carry none).
// Call right after creating the engine.
void configure_engine();

}  // namespace partune::sim
