// Sends and receives between pipeline stages (pipeline_channels.hpp).
#include "partune/backend/pipeline_channels.hpp"

#include <stdexcept>

namespace partune::backend {

PipelineChannels::PipelineChannels(int rank, const Communicators* comms, const ComputeDevice& compute)
    : rank_(rank), comms_(comms), compute_(compute) {}

void PipelineChannels::start_step(std::vector<std::int64_t> activation_shape) {
  shape_ = std::move(activation_shape);
  mailbox_.clear();
}

torch::Tensor PipelineChannels::buffer() const {
  return torch::empty(shape_, through_host() ? compute_.options().device(torch::kCPU) : compute_.options());
}

PipelineChannels::Sent PipelineChannels::send(torch::Tensor t, int peer, int tag, int chunk) {
  t = t.detach().contiguous();
  if (peer == rank_) {
    mailbox_[{tag, chunk}].push_back(t);
    return {c10::intrusive_ptr<c10d::Work>(), t};
  }
  // Gloo on CUDA tensors: the host copy is what travels (and what the work keeps alive).
  if (through_host()) t = host_copy(t, compute_);
  if (compute_.cuda()) synchronize(compute_);  // the copy (or the NCCL stream) sees the finished tensor
  std::vector<torch::Tensor> tensors{t};
  return {comms_->transfers().group->send(tensors, peer, tag), t};
}

void PipelineChannels::post_early_receives(const std::vector<Instruction>& ops, std::size_t i) {
  for (std::size_t j = i + 1; j < ops.size() && !is_compute(ops[j].kind); ++j) {
    const Instruction& r = ops[j];
    if (!r.posted_early || r.peer == rank_ || early_.count(j)) continue;
    const int tag = r.kind == OpKind::recv_activation ? kActivationTag : kGradientTag;
    std::vector<torch::Tensor> tensors{buffer()};
    early_[j] = EarlyReceive{comms_->transfers().group->recv(tensors, r.peer, tag), tensors[0]};
  }
}

torch::Tensor PipelineChannels::receive(std::size_t index, int peer, int tag, int chunk) {
  if (auto posted = early_.find(index); posted != early_.end()) {
    posted->second.work->wait();
    torch::Tensor t = posted->second.buffer;
    early_.erase(posted);
    return through_host() ? t.to(compute_.device) : t;
  }
  if (peer == rank_) {
    auto& box = mailbox_[{tag, chunk}];
    if (box.empty()) throw std::runtime_error("a receive from this rank itself before its send");
    torch::Tensor t = box.front();
    box.pop_front();
    return t;
  }
  std::vector<torch::Tensor> tensors{buffer()};
  comms_->transfers().group->recv(tensors, peer, tag)->wait();
  return through_host() ? tensors[0].to(compute_.device) : tensors[0];
}

}  // namespace partune::backend
