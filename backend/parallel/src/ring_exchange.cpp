// The chunked collectives beside a GEMM (ring_exchange.hpp): rings of point-to-point
// hops over the tensor group.
#include "ring_exchange.hpp"

#include <chrono>
#include <optional>
#include <vector>

namespace partune::backend {

namespace {

constexpr int kRingTag = 3;  // the tensor group's only point-to-point messages

// One hop of a ring: `outgoing` to tensor rank r + 1 and a tensor shaped like it from
// r - 1, both started at construction and completed by wait(). Even ranks post the send
// first, odd ones the receive: NCCL runs a send and a receive between the same two ranks
// on one stream, so at degree 2 both sending first would wait on each other. Gloo reads a
// CUDA tensor's address as host memory: its transfers go through host copies.
class RingHop {
 public:
  RingHop(const CommBackendPtr& group, int rank, int degree, const torch::Tensor& outgoing)
      : device_(outgoing.device()) {
    const bool staged = outgoing.is_cuda() && group->getBackendName() == "gloo";
    send_.push_back(staged ? outgoing.cpu() : outgoing.contiguous());
    recv_.push_back(torch::empty_like(send_[0]));
    const int next = (rank + 1) % degree, previous = (rank + degree - 1) % degree;
    if (rank % 2 == 0) {
      send_work_ = group->send(send_, next, kRingTag);
      recv_work_ = group->recv(recv_, previous, kRingTag);
    } else {
      recv_work_ = group->recv(recv_, previous, kRingTag);
      send_work_ = group->send(send_, next, kRingTag);
    }
  }

  // The tensor received (on the outgoing tensor's device); adds the seconds spent here.
  torch::Tensor wait(double& waited) {
    const auto start = std::chrono::steady_clock::now();
    recv_work_->wait();
    send_work_->wait();
    waited += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return recv_[0].device() == device_ ? recv_[0] : recv_[0].to(device_);
  }

 private:
  torch::Device device_;
  std::vector<torch::Tensor> send_, recv_;  // alive until the transfers complete
  c10::intrusive_ptr<c10d::Work> send_work_, recv_work_;
};

}  // namespace

void ring_all_gather(TensorParallelGroup& group, const torch::Tensor& shard,
                     const std::function<void(int source, const torch::Tensor& chunk)>& on_chunk) {
  const int t = group.degree(), r = group.rank();
  double waited = 0;
  torch::Tensor chunk = shard.contiguous();
  for (int k = 0; k < t; ++k) {
    // Step k holds rank r - k's shard and passes it on to r + 1, which needs it at step k + 1.
    std::optional<RingHop> hop;
    if (k + 1 < t) hop.emplace(group.process_group(), r, t, chunk);
    on_chunk((r - k + t) % t, chunk);
    if (hop) chunk = hop->wait(waited);
  }
  group.count_beside_gemm(CollectiveKind::all_gather, waited);
}

torch::Tensor ring_reduce_scatter(TensorParallelGroup& group, const std::function<torch::Tensor(int owner)>& partial) {
  const int t = group.degree(), r = group.rank();
  double waited = 0;
  std::optional<RingHop> hop;
  torch::Tensor sum;
  for (int k = 0; k < t; ++k) {
    // Step k adds this rank's partial for owner r - 1 - k to the partial sum that came from
    // r - 1 (started on rank owner + 1) and passes it on; at step t - 1 the owner is r.
    const int owner = (r - 1 - k + 2 * t) % t;
    sum = partial(owner);  // computed while the previous hop travels
    if (hop) sum = sum + hop->wait(waited);
    hop.reset();
    if (k + 1 < t) hop.emplace(group.process_group(), r, t, sum);
  }
  group.count_beside_gemm(CollectiveKind::reduce_scatter, waited);
  return sum;
}

}  // namespace partune::backend
