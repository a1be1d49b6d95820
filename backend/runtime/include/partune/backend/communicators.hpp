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

#include <torch/torch.h>

#include "partune/backend/torch_compat.hpp"
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "partune/backend/launcher.hpp"

#include "partune/costmodel/job.hpp"
#include "partune/costmodel/program.hpp"

namespace partune::backend {

// The rendezvous of a multi-rank run: this rank's connection to the store every rank
// shares (the server too on the rank that hosts it, env.hosts_store()). Bounded by
// env.rendezvous_timeout_s; throws std::runtime_error naming the cause:
//  - the rank hosting the store finds MASTER_PORT already in use on this machine;
//  - another rank cannot reach the store ("could not reach rank 0 at HOST:PORT within N s");
//  - ranks started with different WORLD_SIZE values (both numbers named; every rank
//    writes its own and compares it with the host's);
//  - the hosting rank does not hear from every other rank within the timeout (naming them).
// `local_failure` (non-empty: this rank cannot run, e.g. why_not_runnable) is written to
// the store for the others (the hosting rank just throws it) and then thrown. A cause
// found here is written under partune/failed, so that the other ranks stop naming it.
// Afterwards the store's operations time out after `operation_timeout`.
c10::intrusive_ptr<c10d::TCPStore> join_rendezvous(const RankEnvironment& env, std::chrono::milliseconds operation_timeout,
                                                   const std::string& local_failure = {});

struct Communicator {
  CommBackendPtr group;  // null when this rank is alone in it
  std::vector<int> members;                      // global ranks, in rank order
  int index = 0;                                 // this rank's position in members
  int size() const { return static_cast<int>(members.size()); }
};

// Which c10d implementation connects the ranks: Gloo on the CPU; on CUDA devices NCCL when
// every local rank has a GPU of its own (NCCL refuses two ranks on one device), else Gloo
// with CUDA tensors, its point-to-point transfers staged through host memory (Gloo's
// send / recv read the tensor's address as host memory). PARTUNE_COMM_BACKEND=nccl|gloo
// forces one (the GPU check records NCCL's answer to two ranks on one device).
enum class CommBackendKind { gloo, nccl };
CommBackendKind comm_backend_for(const torch::Device& device, int local_world_size);
const char* to_string(CommBackendKind k);

class Communicators {
 public:
  // Connects rank `rank` of the job's world through `store` (the rendezvous every rank
  // shares). `timeout` bounds every collective: a peer that stops answering turns into an
  // error instead of a hang. `device` is where the rank's tensors live.
  Communicators(const Job& job, int rank, c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds timeout,
                const torch::Device& device = torch::kCPU, int local_world_size = 1);

  CommBackendKind backend() const { return backend_; }
  // Pipeline transfers of CUDA tensors go through host copies (Gloo on CUDA tensors).
  bool stages_transfers_through_host() const { return staged_; }
  int rank() const { return rank_; }
  int world_size() const { return world_.size(); }
  const Communicator& world() const { return world_; }
  // Pipeline sends and receives: the world group, or with NCCL its device twin.
  const Communicator& transfers() const { return transfers_; }
  const Communicator& group(CommGroup kind) const { return groups_.at(static_cast<std::size_t>(kind)); }
  // The tensor group's members in tensor-coordinate order.
  const Communicator& tensor() const { return group(CommGroup::tensor); }

 private:
  int rank_ = 0;
  CommBackendKind backend_ = CommBackendKind::gloo;
  bool staged_ = false;
  Communicator world_, transfers_;
  std::array<Communicator, kCommGroupCount> groups_;  // indexed by CommGroup
};

}  // namespace partune::backend
