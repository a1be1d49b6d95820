#pragma once
// Private to sim/: how one member runs a collective's traffic (collective.hpp) on the
// simulated platform. Shared by World::execute_collective and simulate_collective(), so
// the agreement tests run the simulator's own code path.
#include <simgrid/s4u.hpp>

#include <cstddef>

#include "partune/costmodel/collective.hpp"

namespace partune::sim {

// Where a member's collective flows go: its successor on its NVLink level and on the
// network (null: none), each through the successor's collective mailbox when it has one.
// A host-to-host flow (Comm::sendto_async) is what SimGrid 3.32 detaches and keeps in one
// list for the whole simulation, removing each finished flow by a linear search: with
// thousands of ranks in flight that search was most of the run (docs/performance.md).
// A flow put into a mailbox whose actor receives eagerly (Mailbox::set_receiver) moves
// the same bytes over the same route, and is kept by its sender alone.
struct PhaseTargets {
  simgrid::s4u::Host* intra_successor = nullptr;
  simgrid::s4u::Host* net_successor = nullptr;
  simgrid::s4u::Mailbox* intra_mailbox = nullptr;
  simgrid::s4u::Mailbox* net_mailbox = nullptr;
};

// Runs the phases one after another from `host`: in each phase `intra_bytes x count` go
// to the intra successor and `net_bytes x count x nic_share` to the net successor
// (through the sender's NIC), both at once, and the phase ends when both have arrived.
// The collective's `latency x count` is the caller's to add. A missing successor, or a
// phase without bytes for it, sends nothing on that level. `nic_share` > 1 carries the bytes of
// members not simulated that send the same amounts through the same NIC at the same
// moments. Returns the number of flows started.
long send_collective_phases(simgrid::s4u::Host* host, const PhaseTargets& to, const CollectiveTraffic& traffic,
                            double count, double nic_share);

// SimGrid's settings for every simulation in this process (World::run and
// simulate_collectives): pure max-min sharing with no TCP corrections, so link shares are
// the model's, and latencies added by the collectives themselves (links carry none).
// Call right after creating the engine.
// Simulations of more than kGuardedRanks ranks run their actors' stacks without guard
// pages (a stack overflow then corrupts memory instead of stopping at once).
inline constexpr std::size_t kGuardedRanks = 8192;
void configure_engine(std::size_t ranks);

}  // namespace partune::sim
