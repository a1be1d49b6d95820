#pragma once
// One rank's c10d process groups, built from the job's placement the way the simulator
// builds its communicators (comm_group_members in costmodel/program.hpp): a world group
// for point-to-point transfers and one group per CommGroup kind this rank belongs to.
// Gloo on CPU. Every rank constructs its groups in the same kind order, so the Gloo
// rendezvous of one kind never waits on a rank that is still at another.
#include <array>
#include <chrono>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program.hpp"

namespace partune::backend {

struct Communicator {
  c10::intrusive_ptr<c10d::ProcessGroup> group;  // null when this rank is alone in it
  std::vector<int> members;                      // global ranks, in rank order
  int index = 0;                                 // this rank's position in members
  int size() const { return static_cast<int>(members.size()); }
};

class Communicators {
 public:
  // Connects rank `rank` of the job's world through `store` (the rendezvous every rank
  // shares). `timeout` bounds every collective: a peer that stops answering turns into an
  // error instead of a hang.
  Communicators(const Job& job, int rank, c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout);

  int rank() const { return rank_; }
  int world_size() const { return world_.size(); }
  const Communicator& world() const { return world_; }
  const Communicator& group(CommGroup kind) const { return groups_.at(static_cast<std::size_t>(kind)); }
  // The tensor group's members in tensor-coordinate order.
  const Communicator& tensor() const { return group(CommGroup::tensor); }

 private:
  int rank_ = 0;
  Communicator world_;
  std::array<Communicator, 6> groups_;  // indexed by CommGroup
};

}  // namespace partune::backend
