#pragma once
// Private to sim/: the program actor of one simulated rank: walks its instructions, one
// handler per instruction kind (simulator.md §5.5).
#include <memory>
#include <vector>

#include "copy_completion.hpp"
#include "memory_track.hpp"
#include "slowdown.hpp"
#include "world.hpp"

namespace partune::sim {

class RankProgramRunner final : public CollectiveObserver {
 public:
  RankProgramRunner(World& world, RankState& rs);
  // Instructions run as one wait with the next (plan_fusions): fewer simcalls, the same
  // simulated times (docs/performance.md §1, step 10).
  enum Fusion : char { none, compute_then_collective, latency_into_next };
  // The actor's body: runs the program, then records the end time and stops the streams.
  void run();

  // Completion callbacks of async collectives (called on their stream actors).
  void collective_started(CollectiveRequest& req) override { running_.started(req); }
  void collective_ended(CollectiveRequest& req) override;

 private:
  void run_compute(const Instruction& in);
  void run_compute_then_collective(int index, double start);
  void run_send(int index, const Instruction& in);
  // Receives flagged posted_early that follow compute instruction `index` (before the next
  // compute): posted now, so their bytes move while it runs.
  void post_early_receives(int index);
  void run_recv(int index, const Instruction& in, double start);
  void run_collective(int index, const Instruction& in, double start);
  void run_offload(int index, const Instruction& in);
  void run_reload(int index, const Instruction& in);
  void run_state_copy(const Instruction& in, double start);
  void run_wait(const Instruction& in, double start);
  void wait_copy_or_send(const Instruction& in, double start);
  void wait_collective(const Instruction& in, double start);
  void stop_streams();
  // A head on stage 0 runs as instructions of its own chunk (chunk = virtual_stages).
  bool head_hop(const Instruction& in) const { return head_first_ && in.chunk == chunks_; }

  World& world_;
  RankState& rs_;
  const std::vector<Instruction>& ops_;
  const bool head_first_;
  const int chunks_;
  std::vector<s4u::CommPtr> comms_;  // sends, copies and early receives not yet waited for, by index
  int* received_ = nullptr;          // an early receive's payload (only its size matters)
  std::vector<s4u::SemaphorePtr> copies_done_;  // offloads: released when their completion is reported
  CopyCompletion offloads_;
  std::vector<std::unique_ptr<CollectiveRequest>> requests_;  // collectives, by index
  MemoryTrack memory_;
  RunningCollectives running_;
  std::vector<char> fused_;  // Fusion, by instruction index
  double latency_owed_ = 0;  // a receive's latency, to be slept with the next kernels
};

}  // namespace partune::sim
