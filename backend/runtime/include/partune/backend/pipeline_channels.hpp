#pragma once
// The point-to-point channels between pipeline stages: a rank's sends and receives of
// activations and their gradients over the world group (c10d send / recv, paired by
// (peer, tag) in order), a send to this rank itself kept for its receive (a V's turn or
// interleaved stages on one rank), the receives posted early (overlap_p2p_comm), and
// with Gloo on CUDA tensors the host copies that travel in their place.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/communicators.hpp"
#include "partune/backend/compute_device.hpp"
#include "partune/costmodel/program.hpp"

namespace partune::backend {

// Point-to-point tags: a pair of ranks can exchange both kinds in both directions
// (interleaved stages wrap around), and Gloo pairs messages per (peer, tag) in order.
constexpr int kActivationTag = 1, kGradientTag = 2;

class PipelineChannels {
 public:
  // `comms` may be null for a world of one (every transfer then stays on this rank).
  PipelineChannels(int rank, const Communicators* comms, const ComputeDevice& compute);

  // The shape of what a stage boundary carries this step ([sequences, seq, hidden], or
  // the sequence shard's); the sends to itself of an earlier step are dropped.
  void start_step(std::vector<std::int64_t> activation_shape);

  // What a send started: its work (null for a send to this rank itself, which completes
  // at once) and the tensor that travels (kept alive until the work completes).
  struct Sent {
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor tensor;
  };
  // Sends `t` (of `chunk`, under `tag`) to `peer`.
  Sent send(torch::Tensor t, int peer, int tag, int chunk);
  // Receives from `peer` what program instruction `index` names: the early receive posted
  // for it, what this rank sent itself, or a blocking receive. On the compute device.
  torch::Tensor receive(std::size_t index, int peer, int tag, int chunk);
  // The receives of `ops` flagged posted_early between compute instruction i and the next
  // compute, posted before it runs (as the simulator does).
  void post_early_receives(const std::vector<Instruction>& ops, std::size_t i);

 private:
  // Gloo on CUDA tensors: the transfers go through host memory.
  bool through_host() const { return compute_.cuda() && comms_ && comms_->stages_transfers_through_host(); }
  torch::Tensor buffer() const;

  int rank_ = 0;
  const Communicators* comms_ = nullptr;
  ComputeDevice compute_;
  std::vector<std::int64_t> shape_;
  struct EarlyReceive {
    c10::intrusive_ptr<c10d::Work> work;
    torch::Tensor buffer;
  };
  std::map<std::size_t, EarlyReceive> early_;                         // by instruction index
  std::map<std::pair<int, int>, std::deque<torch::Tensor>> mailbox_;  // (tag, chunk) -> sends to itself
};

}  // namespace partune::backend
