// A part's forward, recompute and backward, and the offload of its input (executor_state.hpp).
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "executor_state.hpp"
#include "partune/backend/memory_accounting.hpp"

namespace partune::backend {

void free_tensors(Part& part) {
  part.input = torch::Tensor();
  part.host_input = torch::Tensor();
  part.output = torch::Tensor();
  part.head_input = torch::Tensor();
  part.loss = torch::Tensor();
  part.attention_cores.clear();
}

using Impl = ProgramExecutor::Impl;

Part Impl::make_part(const Instruction& ins) const {
  Part part;
  if (ins.chunk == v) {  // the head alone, on stage 0
    part.head = true;
    return part;
  }
  part.first = ins.layer < 0 ? 0 : ins.layer;
  part.count = ins.layer < 0 ? layers(ins.chunk) : std::max<int>(1, ins.layers);
  part.embedding = part.first == 0 && first_model_stage(ins.chunk);
  part.head = !head_first && last_model_stage(ins.chunk) && part.first + part.count == layers(ins.chunk);
  return part;
}

// The part's layers (and embedding / head) from its input, with or without autograd. As
// in Megatron, full checkpointing repeats only the transformer layers: a checkpointed
// part's embedding ran with autograd before its forward (its output is the part's input)
// and its head runs with autograd in the forward, from the layers' detached output, and is
// not run again by the recompute. Selective checkpointing runs with autograd, its layers'
// attention cores keeping Q, K and V only (transformer_layer.hpp).
void Impl::run_part(Part& part, int mb, int chunk, bool with_grad) {
  std::unique_ptr<torch::NoGradGuard> no_grad;
  if (!with_grad) no_grad = std::make_unique<torch::NoGradGuard>();
  std::unique_ptr<SelectiveRecompute::Scope> selective;
  if (part.selective) selective = std::make_unique<SelectiveRecompute::Scope>(part.attention_cores);
  const MicroBatchData& d = (*data)[static_cast<std::size_t>(mb)];
  torch::Tensor x = part.embedding && !part.input.defined() ? model->embed(d.tokens) : part.input;
  for (int l = part.first; l < part.first + part.count; ++l) x = model->layer(job.global_layer(stage, chunk, l), x);
  if (!part.head) {
    part.output = x;
  } else if (!part.checkpointed) {
    part.loss = model->head_loss(x, d.targets) / microbatches;
  } else if (!with_grad) {  // the forward of a checkpointed part
    torch::AutoGradMode head_with_grad(true);
    part.head_input = x.detach().requires_grad_(true);
    part.loss = model->head_loss(part.head_input, d.targets) / microbatches;
  } else {  // its recompute: the layers alone
    part.output = x;
  }
}

void Impl::forward(const Instruction& ins, std::size_t i, const std::set<PartKey>& recomputed) {
  const PartKey key{ins.microbatch, ins.chunk, ins.layer < 0 ? 0 : ins.layer};
  if (parts.count(key)) throw std::runtime_error(fmt::format("{}: this forward ran already", describe(ins, i)));
  Part part = make_part(ins);
  const bool selective = job.parallel.activation_checkpointing == Checkpointing::selective;
  part.checkpointed = recomputed.count(key) > 0 && !selective;
  part.selective = recomputed.count(key) > 0 && selective;
  if (part.embedding && part.checkpointed)
    part.input = model->embed((*data)[static_cast<std::size_t>(ins.microbatch)].tokens);  // kept, not recomputed
  if (!part.embedding) {
    if (part.first == 0) {
      // The chunk's input came from the previous stage.
      auto in = chunk_input.find({ins.microbatch, ins.chunk});
      if (in == chunk_input.end())
        throw std::runtime_error(fmt::format("{}: no activation was received for it", describe(ins, i)));
      part.input = in->second;
      chunk_input.erase(in);
    } else {
      // The previous part's output, cut from its graph so each backward is its own instruction.
      Part* prev = find_part(ins.microbatch, ins.chunk, [&](const Part& q) { return q.first + q.count == part.first; });
      if (!prev || !prev->output.defined())
        throw std::runtime_error(fmt::format("{}: no forward output of layer {} to start from", describe(ins, i),
                                             part.first - 1));
      part.input = prev->output.detach().requires_grad_(true);
    }
  }
  run_part(part, ins.microbatch, ins.chunk, !part.checkpointed);
  if (part.head) loss_sum += part.loss.item<double>() * microbatches;
  // A V's turn: the next model chunk is this stage's other chunk.
  if (!part.head && part.first + part.count == layers(ins.chunk))
    if (const int next = local_chunk(ins.chunk, +1); next >= 0)
      chunk_input[{ins.microbatch, next}] = part.output.detach().requires_grad_(true);
  parts.emplace(key, std::move(part));
}

Part& Impl::part_of(const Instruction& ins, std::size_t i, const char* what) {
  auto it = parts.find({ins.microbatch, ins.chunk, ins.layer < 0 ? 0 : ins.layer});
  if (it == parts.end()) throw std::runtime_error(fmt::format("{}: {} before its forward", describe(ins, i), what));
  return it->second;
}

// Full checkpointing: the part's layers again, with autograd (their tensor collectives
// too, as the program lists them). Selective: the attention cores' probabilities alone.
void Impl::recompute(const Instruction& ins, std::size_t i) {
  Part& part = part_of(ins, i, "recompute");
  if (part.selective) {
    part.attention_cores.recompute();
    return;
  }
  if (!part.embedding && !part.input.defined())
    throw std::runtime_error(fmt::format("{}: its input is offloaded and was not reloaded", describe(ins, i)));
  run_part(part, ins.microbatch, ins.chunk, true);
}

void Impl::backward(const Instruction& ins, std::size_t i) {
  Part& part = part_of(ins, i, "backward");
  // A split backward (B): the projections leave their weight gradients to the part's store.
  std::optional<WeightGradientStore::Scope> deferring;
  if (split_backward()) deferring.emplace(part.weight_gradients);
  if (part.head) {
    if (!part.loss.requires_grad())
      throw std::runtime_error(fmt::format("{}: the head ran without autograd", describe(ins, i)));
    part.loss.backward();
    if (part.head_input.defined()) {  // checkpointed: on through the recomputed layers
      if (!part.output.defined() || !part.output.requires_grad())
        throw std::runtime_error(fmt::format("{}: checkpointed part not recomputed", describe(ins, i)));
      part.output.backward(part.head_input.grad());
      part.head_input = torch::Tensor();
    }
  } else {
    torch::Tensor grad;
    Part* next = nullptr;
    if (part.first + part.count == layers(ins.chunk)) {
      auto g = output_grad.find({ins.microbatch, ins.chunk});
      if (g == output_grad.end())
        throw std::runtime_error(fmt::format("{}: no gradient was received for its output", describe(ins, i)));
      grad = g->second;
      output_grad.erase(g);
    } else {
      next = find_part(ins.microbatch, ins.chunk, [&](const Part& q) { return q.first == part.first + part.count; });
      if (!next || !next->input.defined() || !next->input.grad().defined())
        throw std::runtime_error(fmt::format("{}: the layers after it have not run backward", describe(ins, i)));
      grad = next->input.grad();
    }
    if (!part.output.requires_grad())
      throw std::runtime_error(fmt::format("{}: checkpointed part not recomputed", describe(ins, i)));
    part.output.backward(grad);
    if (next) free_tensors(*next);  // its backward is over
  }
  part.loss = torch::Tensor();
  part.output = torch::Tensor();
  part.attention_cores.clear();  // their Q, K, V go with the graph
  // A V's turn: the gradient of this chunk's input is the previous chunk's output gradient.
  if (part.first == 0 && !part.embedding)
    if (const int previous = local_chunk(ins.chunk, -1); previous >= 0) {
      if (!part.input.defined() || !part.input.grad().defined())
        throw std::runtime_error(fmt::format("{}: no input gradient to hand to chunk {}", describe(ins, i), previous));
      output_grad[{ins.microbatch, previous}] = part.input.grad();
    }
}

void Impl::backward_weight(const Instruction& ins, std::size_t i) {
  part_of(ins, i, "backward_weight").weight_gradients.run();
}

void Impl::offload(const Instruction& ins, std::size_t i) {
  Part& part = part_of(ins, i, "offload");
  // An embedding's output stays with its graph, and so does a selective part's input
  // (its graph holds it: only a fully checkpointed part runs again from its input).
  if (part.input.defined() && !part.embedding && !part.selective) {
    HostMemoryScope host;
    part.host_input = host_copy(part.input, compute);  // pinned on CUDA: the copy runs asynchronously
    part.input = torch::Tensor();
  }
  pending[static_cast<int>(i)] = Pending{};
}

void Impl::reload(const Instruction& ins, std::size_t i) {
  Part& part = part_of(ins, i, "reload");
  if (part.host_input.defined()) {
    part.input = part.host_input.to(compute.device, /*non_blocking=*/compute.cuda(), /*copy=*/true).requires_grad_(true);
    part.host_input = torch::Tensor();
  }
  pending[static_cast<int>(i)] = Pending{};
}

}  // namespace partune::backend
