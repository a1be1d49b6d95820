#pragma once
// Private to sim/: the members of a collective meet here, at its start (every member has
// called it) and at its end (the slowest member decides). A counter and one semaphore:
// the last member to arrive knows it is last, so it can wait out the collective's latency
// for all before it releases the others (one timer a collective instead of one a member),
// which s4u::Barrier cannot tell it. Replacing the barrier changed no time measurably.
#include <simgrid/s4u.hpp>

namespace partune::sim {

class Rendezvous {
 public:
  explicit Rendezvous(int members) : members_(members), gate_(simgrid::s4u::Semaphore::create(0)) {}
  // Blocks until `members` calls have arrived since the last meeting, then `linger`
  // seconds more (the last to arrive waits them out before it lets the others go);
  // reusable at once (actors run one at a time, so the count needs no lock).
  void arrive(double linger = 0) {
    if (++arrived_ < members_) {
      gate_->acquire();
      return;
    }
    arrived_ = 0;
    if (linger > 0) simgrid::s4u::this_actor::sleep_for(linger);
    for (int i = 1; i < members_; ++i) gate_->release();
  }

 private:
  int members_;
  int arrived_ = 0;
  simgrid::s4u::SemaphorePtr gate_;
};

}  // namespace partune::sim
