// Pipeline transfers: activations and their gradients between stages (executor_state.hpp).
#include <fmt/format.h>

#include "executor_state.hpp"

namespace partune::backend {

using Impl = ProgramExecutor::Impl;

// The chunk whose output a send_activation / recv_gradient refers to: the head hop's
// (chunk = virtual_stages) is the last chunk's output on the last stage.
int Impl::output_chunk(const Instruction& ins) const { return ins.chunk == v ? v - 1 : ins.chunk; }

// What a stage boundary carries: [sequences, seq, hidden], the rank's sequence shard
// [sequences, seq / t, hidden] with sequence parallelism.
torch::Tensor Impl::activation_buffer() const {
  const MicroBatchData& d = data->front();
  std::int64_t seq = d.tokens.size(1);
  if (model->shard.conjugates.splits_sequence()) seq = sequence_slice(seq, model->shard.tensor).size;
  return torch::empty({d.tokens.size(0), seq, static_cast<std::int64_t>(model->spec.hidden)},
                      staged_transfers() ? compute.options().device(torch::kCPU) : compute.options());
}

void Impl::send(const Instruction& ins, std::size_t i, torch::Tensor t, int tag) {
  t = t.detach().contiguous();
  if (ins.peer == program.rank) {
    mailbox[{tag, ins.chunk}].push_back(t);
    pending[static_cast<int>(i)] = Pending{};
    return;
  }
  // Gloo on CUDA tensors: the host copy is what travels (and what the work keeps alive).
  if (staged_transfers()) t = host_copy(t, compute);
  if (compute.cuda()) synchronize(compute);  // the copy (or the NCCL stream) sees the finished tensor
  std::vector<torch::Tensor> tensors{t};
  pending[static_cast<int>(i)] = Pending{comms->transfers().group->send(tensors, ins.peer, tag), [t] {}};
  if (!ins.async) finish(static_cast<int>(i));
}

void Impl::post_early_receives(const std::vector<Instruction>& ops, std::size_t i) {
  for (std::size_t j = i + 1; j < ops.size() && !is_compute(ops[j].kind); ++j) {
    const Instruction& r = ops[j];
    if (!r.posted_early || r.peer == program.rank || early.count(j)) continue;
    const int tag = r.kind == OpKind::recv_activation ? kActivationTag : kGradientTag;
    std::vector<torch::Tensor> tensors{activation_buffer()};
    early[j] = EarlyReceive{comms->transfers().group->recv(tensors, r.peer, tag), tensors[0]};
  }
}

torch::Tensor Impl::receive(const Instruction& ins, std::size_t i, int tag) {
  if (auto posted = early.find(i); posted != early.end()) {
    posted->second.work->wait();
    torch::Tensor t = posted->second.buffer;
    early.erase(posted);
    return staged_transfers() ? t.to(compute.device) : t;
  }
  if (ins.peer == program.rank) {
    auto& box = mailbox[{tag, ins.chunk}];
    if (box.empty()) throw std::runtime_error("a receive from this rank itself before its send");
    torch::Tensor t = box.front();
    box.pop_front();
    return t;
  }
  std::vector<torch::Tensor> tensors{activation_buffer()};
  comms->transfers().group->recv(tensors, ins.peer, tag)->wait();
  return staged_transfers() ? tensors[0].to(compute.device) : tensors[0];
}

void Impl::send_activation(const Instruction& ins, std::size_t i) {
  const int chunk = output_chunk(ins);
  Part* last = find_part(ins.microbatch, chunk, [&](const Part& q) { return q.first + q.count == layers(chunk); });
  if (!last || !last->output.defined())
    throw std::runtime_error(fmt::format("{}: the chunk's forward has not run", describe(ins, i)));
  send(ins, i, last->output, kActivationTag);
}

void Impl::send_gradient(const Instruction& ins, std::size_t i) {
  Part* first = find_part(ins.microbatch, ins.chunk, [&](const Part& q) { return q.first == 0 && !q.embedding; });
  if (!first || !first->input.defined() || !first->input.grad().defined())
    throw std::runtime_error(fmt::format("{}: the chunk's backward has not run", describe(ins, i)));
  send(ins, i, first->input.grad(), kGradientTag);
  // The chunk's input and its gradient are no longer needed once sent.
  free_tensors(*first);
}

}  // namespace partune::backend
