// Pipeline transfers: activations and their gradients between stages (executor_state.hpp),
// over the rank's PipelineChannels.
#include <fmt/format.h>

#include "executor_state.hpp"

namespace partune::backend {

using Impl = ProgramExecutor::Impl;

// The chunk whose output a send_activation / recv_gradient refers to: the head hop's
// (chunk = virtual_stages) is the last chunk's output on the last stage.
int Impl::output_chunk(const Instruction& ins) const { return ins.chunk == v ? v - 1 : ins.chunk; }

// What a stage boundary carries: [sequences, seq, hidden], the rank's sequence shard
// [sequences, seq / t, hidden] with sequence parallelism.
std::vector<std::int64_t> Impl::activation_shape() const {
  const MicroBatchData& d = data->front();
  std::int64_t seq = d.tokens.size(1);
  if (model->shard.conjugates.splits_sequence()) seq = sequence_slice(seq, model->shard.tensor).size;
  return {d.tokens.size(0), seq, static_cast<std::int64_t>(model->spec.hidden)};
}

void Impl::send(const Instruction& ins, std::size_t i, torch::Tensor t, int tag) {
  PipelineChannels::Sent sent = channels.send(std::move(t), ins.peer, tag, ins.chunk);
  if (!sent.work) {  // to this rank itself: waiting in its mailbox
    pending[static_cast<int>(i)] = Pending{};
    return;
  }
  pending[static_cast<int>(i)] = Pending{sent.work, [kept = sent.tensor] {}};
  if (!ins.async) finish(static_cast<int>(i));
}

torch::Tensor Impl::receive(const Instruction& ins, std::size_t i, int tag) {
  return channels.receive(i, ins.peer, tag, ins.chunk);
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
