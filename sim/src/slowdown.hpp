#pragma once
// Private to sim/: the compute slow-down from async collectives that run beside a rank's
// kernels (simulator.md §5.6).
#include <functional>
#include <map>
#include <vector>

#include "world.hpp"

namespace partune::sim {

// One rank's async collectives that have started running and may still overlap its
// kernels, in issue order. The stream actors report starts and ends as they happen.
class RunningCollectives {
 public:
  void started(CollectiveRequest& req) { running_.emplace(req.index, &req); }
  void ended(const CollectiveRequest& req) { ended_.push_back(req.index); }
  // Its wait: the program knows it is over.
  void forget(int index) { running_.erase(index); }
  // After a compute instruction has paid for them: those that have ended can no longer
  // overlap a later kernel.
  void drop_ended() {
    if (ended_.empty()) return;
    for (int index : ended_) running_.erase(index);
    ended_.clear();
  }
  const std::map<int, CollectiveRequest*>& by_issue() const { return running_; }

 private:
  std::map<int, CollectiveRequest*> running_;  // instruction index -> request
  std::vector<int> ended_;                     // ended since the last drop_ended
};

// Kernels that ran over [t0, t1] lose (1 - compute_overlap) of the time each running
// collective overlapped them; that extra time runs as further kernels (`run_kernels`),
// which collectives still running slow down in turn, to a fixed point. Each amount owed
// is booked in `exposed` under the communicator that caused it.
void pay_compute_slowdown(const RunningCollectives& running, double t0, double t1, ExposedComm& exposed,
                          const std::function<void(double seconds)>& run_kernels);

}  // namespace partune::sim
