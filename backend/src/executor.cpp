// The single-process program executor (executor.hpp).
#include "partune/backend/executor.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace partune::backend {

namespace {

std::string describe(const Instruction& ins, std::size_t index) {
  std::string s = fmt::format("instruction {} ({}", index, to_string(ins.kind));
  if (ins.microbatch >= 0) s += fmt::format(", micro-batch {}", ins.microbatch);
  s += fmt::format(", chunk {}", ins.chunk);
  if (ins.layer >= 0) s += fmt::format(", layer {}", ins.layer);
  if (ins.group != CommGroup::none) s += fmt::format(", group {}", to_string(ins.group));
  return s + ")";
}

// The model layers a compute instruction covers: [first, first + count).
struct LayerRange {
  int first = 0, count = 0;
  int end() const { return first + count; }
};

LayerRange covered(const Job& job, int stage, const Instruction& ins) {
  const int per_chunk = job.layers_per_chunk(stage);
  if (ins.layer < 0) return {job.global_layer(stage, ins.chunk, 0), per_chunk};
  return {job.global_layer(stage, ins.chunk, ins.layer), std::max<int>(1, ins.layers)};
}

using Key = std::tuple<int, int, int>;  // (micro-batch, chunk, layer) of a forward
Key key_of(const Instruction& ins) { return {ins.microbatch, ins.chunk, ins.layer}; }

// What a forward left for its recompute and backward.
struct Part {
  LayerRange range;
  bool checkpointed = false;  // the program recomputes it: the forward ran without autograd
  torch::Tensor input;        // a leaf requiring grad (undefined for the part holding the embedding)
  torch::Tensor output;       // end of the autograd graph (undefined for the part holding the head)
  torch::Tensor loss;         // the part holding the head: the scaled loss
  double loss_value = 0;      // and its unscaled value
};

}  // namespace

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check_executable(const Job& job, const RankProgram& program) {
  const int stage = program.coords.pipeline;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Instruction& ins = program.ops[i];
    switch (ins.kind) {
      case OpKind::forward:
      case OpKind::recompute:
      case OpKind::backward:
        if (ins.chunk >= job.parallel.virtual_stages)
          throw UnsupportedInstruction(fmt::format(
              "{}: the LM head on stage 0 (lm_head_stage: first) cannot be executed yet", describe(ins, i)));
        if (ins.microbatch < 0)
          throw UnsupportedInstruction(fmt::format("{}: a compute instruction without a micro-batch", describe(ins, i)));
        if (ins.layer >= 0 && ins.layers < 1)
          throw UnsupportedInstruction(fmt::format("{}: covers no layer", describe(ins, i)));
        (void)stage;
        break;
      case OpKind::optimizer_step:
        break;
      default:
        throw UnsupportedInstruction(fmt::format(
            "{}: the LibTorch backend cannot execute {} yet (single-process execution runs forward, recompute, "
            "backward and optimizer_step only)",
            describe(ins, i), to_string(ins.kind)));
    }
  }
}

ProgramExecutor::ProgramExecutor(const Job& job, GPTModel model, torch::optim::Optimizer& optimizer)
    : job_(job), model_(std::move(model)), optimizer_(optimizer) {}

StepOutcome ProgramExecutor::run(const RankProgram& program, const std::vector<MicroBatchData>& data,
                                 std::vector<ExecutedEvent>* events, double t0) {
  check_executable(job_, program);
  const int stage = program.coords.pipeline;
  const int model_layers = job_.model.layers;

  // Which forwards the program recomputes, and how many micro-batches the step has.
  std::set<Key> recomputed;
  std::set<int> microbatches;
  for (const Instruction& ins : program.ops) {
    if (ins.kind == OpKind::recompute) recomputed.insert(key_of(ins));
    if (ins.kind == OpKind::forward) microbatches.insert(ins.microbatch);
  }
  const int m = static_cast<int>(microbatches.size());
  if (m == 0) throw std::runtime_error("program has no forward instruction");
  if (static_cast<int>(data.size()) != m || *microbatches.rbegin() != m - 1)
    throw std::runtime_error(fmt::format("program runs micro-batches 0..{} but {} were given",
                                         *microbatches.rbegin(), data.size()));
  const double scale = 1.0 / m;

  std::map<Key, Part> parts;
  // Per micro-batch, the part that starts at a given model layer (to find the gradient of
  // a part's output: the input gradient of the part after it).
  std::map<std::pair<int, int>, Key> part_at;
  double loss_sum = 0;

  // Runs the layers of `part` from its input (or the tokens) with or without autograd.
  auto run_layers = [&](Part& part, const MicroBatchData& d, bool with_grad) {
    std::unique_ptr<torch::NoGradGuard> no_grad;
    if (!with_grad) no_grad = std::make_unique<torch::NoGradGuard>();
    torch::Tensor x = part.range.first == 0 ? model_->embed(d.tokens) : part.input;
    for (int l = part.range.first; l < part.range.end(); ++l) x = model_->layer(l, x);
    if (part.range.end() == model_layers) {
      const torch::Tensor raw = model_->head_loss(x, d.targets);
      part.loss_value = raw.item<double>();
      part.loss = raw * scale;
      part.output = torch::Tensor();
    } else {
      part.output = x;
    }
  };

  optimizer_.zero_grad();
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Instruction& ins = program.ops[i];
    const double start = monotonic_seconds();
    switch (ins.kind) {
      case OpKind::forward: {
        const Key k = key_of(ins);
        if (parts.count(k)) throw std::runtime_error(fmt::format("{}: this forward ran already", describe(ins, i)));
        Part part;
        part.range = covered(job_, stage, ins);
        part.checkpointed = recomputed.count(k) > 0;
        if (part.range.first > 0) {
          // The input is the previous part's output, cut from its graph so that each
          // part's backward is its own instruction.
          const auto prev = std::find_if(parts.begin(), parts.end(), [&](const auto& kv) {
            return std::get<0>(kv.first) == ins.microbatch && kv.second.range.end() == part.range.first;
          });
          if (prev == parts.end() || !prev->second.output.defined())
            throw std::runtime_error(fmt::format("{}: no forward output of layer {} to start from", describe(ins, i),
                                                 part.range.first - 1));
          part.input = prev->second.output.detach().requires_grad_(true);
        }
        run_layers(part, data[static_cast<std::size_t>(ins.microbatch)], !part.checkpointed);
        if (part.loss.defined()) loss_sum += part.loss_value;
        part_at[{ins.microbatch, part.range.first}] = k;
        parts.emplace(k, std::move(part));
        break;
      }
      case OpKind::recompute: {
        auto it = parts.find(key_of(ins));
        if (it == parts.end())
          throw std::runtime_error(fmt::format("{}: recompute before its forward", describe(ins, i)));
        run_layers(it->second, data[static_cast<std::size_t>(ins.microbatch)], true);
        break;
      }
      case OpKind::backward: {
        auto it = parts.find(key_of(ins));
        if (it == parts.end())
          throw std::runtime_error(fmt::format("{}: backward before its forward", describe(ins, i)));
        Part& part = it->second;
        if (part.loss.defined()) {
          if (!part.loss.requires_grad())
            throw std::runtime_error(fmt::format("{}: checkpointed part not recomputed", describe(ins, i)));
          part.loss.backward();
        } else {
          const auto next = part_at.find({ins.microbatch, part.range.end()});
          if (next == part_at.end() || !parts.at(next->second).input.grad().defined())
            throw std::runtime_error(fmt::format("{}: the layers after it have not run backward", describe(ins, i)));
          if (!part.output.requires_grad())
            throw std::runtime_error(fmt::format("{}: checkpointed part not recomputed", describe(ins, i)));
          part.output.backward(parts.at(next->second).input.grad());
          Part& done = parts.at(next->second);  // its backward is over: free its tensors
          done.input = torch::Tensor();
          done.output = torch::Tensor();
          done.loss = torch::Tensor();
        }
        part.loss = torch::Tensor();
        part.output = torch::Tensor();
        break;
      }
      case OpKind::optimizer_step:
        optimizer_.step();
        break;
      default:
        break;  // unreachable: check_executable rejected it
    }
    if (events) {
      ExecutedEvent e;
      e.rank = program.rank;
      e.kind = ins.kind;
      e.group = ins.group;
      e.microbatch = ins.microbatch;
      e.chunk = ins.chunk;
      e.layer = ins.layer;
      e.start = start - t0;
      e.end = monotonic_seconds() - t0;
      events->push_back(e);
    }
  }
  StepOutcome out;
  out.loss = loss_sum / m;
  out.microbatches = m;
  return out;
}

}  // namespace partune::backend
