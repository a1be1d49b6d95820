// The program executor (executor.hpp): construction, the optimizer step, the step loop
// and sharded checkpoints. The steps themselves are in executor_*.cpp (executor_state.hpp
// lists them).
#include "partune/backend/executor.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "device_clock.hpp"
#include "executor_state.hpp"
#include "partune/costmodel/program_builder.hpp"

namespace partune::backend {

std::string describe(const Instruction& ins, std::size_t index) {
  std::string s = fmt::format("instruction {} ({}", index, to_string(ins.kind));
  if (ins.microbatch >= 0) s += fmt::format(", micro-batch {}", ins.microbatch);
  s += fmt::format(", chunk {}", ins.chunk);
  if (ins.layer >= 0) s += fmt::format(", layer {}", ins.layer);
  if (ins.group != CommGroup::none) s += fmt::format(", group {}", to_string(ins.group));
  return s + ")";
}

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check_executable(const Job& job, const RankProgram& program) {
  if (const Checkpointing c = job.parallel.activation_checkpointing; c == Checkpointing::op || c == Checkpointing::dots)
    throw UnsupportedInstruction(fmt::format(
        "parallel.activation_checkpointing: {} (a stack's per-matmul checkpointing) is priced by the cost model but "
        "not run by the LibTorch backend (it runs none, selective and full)",
        to_string(c)));
  const int v = job.parallel.virtual_stages;
  const bool sharded = job.parallel.sharded_data_parallel_degree > 1;
  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Instruction& ins = program.ops[i];
    if (ins.chunk > v || (ins.chunk == v && !job.lm_head_on_first_stage()))
      throw UnsupportedInstruction(fmt::format("{}: chunk {} does not exist (virtual_stages {})", describe(ins, i),
                                               ins.chunk, v));
    if (is_compute(ins.kind) && ins.kind != OpKind::optimizer_step && ins.microbatch < 0)
      throw UnsupportedInstruction(fmt::format("{}: a compute instruction without a micro-batch", describe(ins, i)));
    if (ins.group == CommGroup::sharded && ins.chunk == v)
      throw UnsupportedInstruction(fmt::format(
          "{}: sharded data parallelism with the LM head on stage 0 (lm_head_stage: first) is not supported by the "
          "LibTorch backend: the head's gathered embedding would have to belong to two gradient buckets",
          describe(ins, i)));
    if (run_by_layers(ins) && ins.layer < 0 && sharded)
      throw UnsupportedInstruction(fmt::format("{}: chunk-granularity program", describe(ins, i)));
    if (ins.group == CommGroup::expert_data && ins.kind != OpKind::all_reduce)
      throw UnsupportedInstruction(fmt::format(
          "{}: optimizer-state sharding with expert parallelism is not supported by the LibTorch backend",
          describe(ins, i)));
  }
}

using Impl = ProgramExecutor::Impl;

namespace {

// The model's device and format: where it was moved after its initialisation (trainer.cpp).
ComputeDevice device_of(const GPTModel& model) {
  ComputeDevice d;
  if (const auto ps = model->parameters(); !ps.empty()) {
    d.device = ps.front().device();
    d.dtype = ps.front().scalar_type();
  }
  return d;
}

}  // namespace

Impl::Impl(const Job& j, RankProgram prog, GPTModel m, const Communicators* c)
    : job(j),
      program(std::move(prog)),
      model(std::move(m)),
      comms(c),
      compute(device_of(model)),
      buckets(j, program.coords.pipeline, *model),
      channels(program.rank, c, compute) {
  const ParallelConfig& pc = job.parallel;
  stage = program.coords.pipeline;
  p = pc.pipeline_parallel_degree;
  v = pc.virtual_stages;
  dp = job.data_context_degree();  // the gradients' group: data x context ranks
  sdp = pc.sharded_data_parallel_degree;
  head_first = job.lm_head_on_first_stage();
  sharded = sdp > 1;
  zero1 = !sharded && pc.shard_optimizer_state && dp > 1;
  if (job.world_size() > 1 && !comms)
    throw std::invalid_argument("ProgramExecutor: a world of more than one rank needs communicators");
  for (const torch::Tensor& prm : model->sequence_parallel_parameters())
    sequence_parallel.insert(prm.unsafeGetTensorImpl());
}

// The optimizer on what this rank updates: its parameters, or with ZeRO-1 or sharding its
// owned slices of every bucket.
void Impl::build_optimizer(const OptimizerSettings& settings) {
  std::vector<torch::Tensor> params =
      zero1 || sharded ? buckets.shard(shard_degree(), shard_index(), /*release_after_use=*/sharded) : model->parameters();
  optimizer = std::make_unique<MixedPrecisionOptimizer>(std::move(params), settings, compute, job.parallel);
  const bool tied_copies = job.tied_embedding_copies() && (stage == 0 || stage == p - 1);
  if (tied_copies) wte = model->wte;
}

void Impl::optimizer_step() {
  // Experts whose expert-data group is this rank alone (expert x expert-tensor degrees
  // cover the stage's tensor x data ranks): no bucket instruction averaged their
  // gradients, which hold every data-parallel replica's tokens (the exchanges brought
  // them). Averaged here, as bucket_all_reduce averages the others: no communication.
  if (dp > 1 && job.expert_data_parallel_degree() == 1) {
    torch::NoGradGuard no_grad;
    for (auto& [key, params] : buckets.experts())
      for (torch::Tensor& prm : params)
        if (prm.grad().defined()) prm.mutable_grad().div_(dp);
  }
  // Masters on the device: no program instruction moves their gradients (offload's do).
  if (optimizer->masters_on_device()) optimizer->offload_gradients();
  // Slices hold gradient sums over the data-parallel replicas: averaged.
  if (buckets.sharded()) optimizer->average_gradients(dp);
  optimizer->step();
}

// host -> device: the updated values after a host step (no layer), or with
// offload_parameters a layer's shard staged for its all-gather.
void Impl::reload_parameters(const Instruction& ins) {
  if (ins.microbatch < 0) optimizer->sync_model_from_masters();  // after the host step
  else buckets.stage_for_gather({ins.chunk, ins.layer});
}

void Impl::zero_gradients() {
  if (buckets.sharded()) buckets.zero_sharded_gradients();
  else optimizer->zero_grad();
}

void Impl::execute(const Instruction& ins, std::size_t i, const std::set<PartKey>& recomputed, bool& head_ran) {
  switch (ins.kind) {
    case OpKind::forward:
      forward(ins, i, recomputed);
      head_ran = head_ran || make_part(ins).head;
      release_after(ins);
      break;
    case OpKind::recompute: recompute(ins, i); break;
    case OpKind::backward_weight: backward_weight(ins, i); break;
    case OpKind::backward:
      backward(ins, i);
      release_after(ins);
      break;
    case OpKind::send_activation: send_activation(ins, i); break;
    case OpKind::send_gradient: send_gradient(ins, i); break;
    case OpKind::recv_activation: {
      torch::Tensor t = receive(ins, i, kActivationTag);
      chunk_input[{ins.microbatch, ins.chunk}] = t.detach().requires_grad_(true);
      break;
    }
    case OpKind::recv_gradient: output_grad[{ins.microbatch, output_chunk(ins)}] = receive(ins, i, kGradientTag);
      break;
    case OpKind::all_reduce:
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::all_to_all: collective(ins, i); break;
    case OpKind::offload: offload(ins, i); break;
    case OpKind::reload: reload(ins, i); break;
    case OpKind::offload_gradients: optimizer->offload_gradients(); break;
    case OpKind::reload_parameters: reload_parameters(ins); break;
    case OpKind::wait: finish(ins.wait_for); break;  // a tensor instruction's wait: nothing in flight
    case OpKind::optimizer_step: optimizer_step(); break;
  }
}

namespace {

// The simulator's streams: compute, pipeline transfers and copies, one per communicator.
int stream_of(OpKind kind, CommGroup group) {
  if (is_compute(kind) || kind == OpKind::wait) return 0;
  if (is_collective(kind)) return 2 + static_cast<int>(group);
  return 1;
}

TraceEvent event_of(const Instruction& ins, int rank, double start, double end) {
  TraceEvent e;
  e.rank = rank;
  e.stream = stream_of(ins.kind, ins.group);
  e.kind = ins.kind;
  e.group = ins.group;
  e.microbatch = ins.microbatch;
  e.chunk = ins.chunk;
  e.layer = ins.layer;
  e.count = is_collective(ins.kind) ? ins.count : 1;
  e.start = start;
  e.end = end;
  return e;
}

// The micro-batches the program runs (0 .. m - 1, checked against the data) and the
// parts it recomputes.
int microbatches_of(const RankProgram& program, std::size_t given, std::set<PartKey>& recomputed) {
  std::set<int> microbatches;
  for (const Instruction& ins : program.ops) {
    if (ins.kind == OpKind::recompute) recomputed.insert({ins.microbatch, ins.chunk, ins.layer < 0 ? 0 : ins.layer});
    if (ins.microbatch >= 0) microbatches.insert(ins.microbatch);
  }
  const int m = static_cast<int>(microbatches.size());
  if (m == 0) throw std::runtime_error("program has no micro-batch");
  if (static_cast<int>(given) != m || *microbatches.rbegin() != m - 1)
    throw std::runtime_error(
        fmt::format("program runs micro-batches 0..{} but {} were given", *microbatches.rbegin(), given));
  return m;
}

}  // namespace

ProgramExecutor::ProgramExecutor(const Job& job, RankProgram program, GPTModel model, const OptimizerSettings& settings,
                                 const Communicators* comms)
    : impl_(std::make_unique<Impl>(job, std::move(program), std::move(model), comms)) {
  check_executable(job, impl_->program);
  // A schedule that splits backward lists backward_weight instructions: the projections
  // then defer their weight gradients (weight_gradients.hpp).
  const auto& ops = impl_->program.ops;
  set_split_backward(std::any_of(ops.begin(), ops.end(), [](const Instruction& in) {
    return in.kind == OpKind::backward_weight;
  }));
  impl_->build_optimizer(settings);
}

ProgramExecutor::~ProgramExecutor() = default;

const RankProgram& ProgramExecutor::program() const { return impl_->program; }

StepOutcome ProgramExecutor::run(const std::vector<MicroBatchData>& data, std::vector<TraceEvent>* events, double t0) {
  Impl& s = *impl_;
  const RankProgram& program = s.program;
  std::set<PartKey> recomputed;
  const int m = microbatches_of(program, data.size(), recomputed);
  s.data = &data;
  s.microbatches = m;
  s.loss_sum = 0;
  s.parts.clear();
  s.chunk_input.clear();
  s.output_grad.clear();
  s.channels.start_step(s.activation_shape());
  s.zero_gradients();
  const TensorParallel& tp = s.model->shard.tensor;
  if (tp) tp->take_tally();
  const ExpertParallel& ep = s.model->shard.expert;
  if (ep) ep->take_tally();
  const ContextParallel& cp = s.model->shard.context;
  if (cp) cp->take_tally();
  s.tensor_calls.start_step();
  bool head_ran = false;
  // On CUDA, compute instructions are timed by CUDA events (device_clock.hpp) unless the
  // layers make tensor- or expert-parallel calls (booked inline against wall time) or the
  // optimizer works on the host; every other instruction synchronises the device first and
  // is timed by the wall clock, as all of them are on the CPU.
  std::optional<DeviceClock> clock;
  if (s.compute.cuda() && !tp && !ep && !cp && !s.job.parallel.offload_optimizer && !s.job.parallel.offload_parameters) {
    synchronize(s.compute);
    clock.emplace(s.compute.device.index(), monotonic_seconds());
  }

  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Instruction& ins = program.ops[i];
    if (!s.pending.empty()) s.reap_completed();
    const bool on_clock = clock && is_compute(ins.kind);
    if (clock && !on_clock) synchronize(s.compute);  // starts once the device's earlier work is done
    // Events only where a timeline is kept; without one the clock just spares the syncs.
    const bool timed = on_clock && events;
    void* begin = timed ? clock->record() : nullptr;
    if (is_compute(ins.kind)) s.channels.post_early_receives(program.ops, i);
    const double start = monotonic_seconds();
    s.execute(ins, i, recomputed, head_ran);
    void* end = timed ? clock->record() : nullptr;
    if (!on_clock) synchronize(s.compute);  // on CUDA: the instruction's kernels are done before its end is read
    const TraceEvent e = event_of(ins, program.rank, start - t0, monotonic_seconds() - t0);
    if (run_by_layers(ins)) {
      s.tensor_calls.tensor_instruction(ins, i, e, events);
      continue;
    }
    if (timed) clock->span(events->size(), begin, end);
    if (events) events->push_back(e);
    if (is_compute(ins.kind)) {
      TensorCalls calls = tp ? tp->take_tally() : TensorCalls{};
      if (ep) calls += ep->take_tally();  // a layer with experts' exchanges
      if (cp) calls += cp->take_tally();  // the context group's exchanges around the cores
      s.tensor_calls.after_compute(ins, calls, events);
    }
    else if (ins.kind == OpKind::wait) s.tensor_calls.waited(program.ops.at(ins.wait_for), ins.wait_for, events);
    else s.tensor_calls.other_instruction();
  }
  while (!s.pending.empty()) s.finish(s.pending.begin()->first);
  if (clock) {
    synchronize(s.compute);
    if (events) clock->settle(*events, t0);
  }
  if (s.sharded) s.buckets.release_all();
  s.parts.clear();
  StepOutcome out;
  out.has_loss = head_ran;
  out.loss = head_ran ? s.loss_sum / m : 0.0;
  out.microbatches = m;
  out.unbooked_tensor_calls = s.tensor_calls.unbooked();
  return out;
}

void ProgramExecutor::save(torch::serialize::OutputArchive& archive) {
  Impl& s = *impl_;
  torch::NoGradGuard no_grad;
  if (!s.buckets.sharded()) {
    for (const auto& kv : s.model->named_parameters()) archive.write("param." + kv.key(), kv.value());
  } else {
    for (auto& [k, sh] : s.buckets.shards()) archive.write(fmt::format("shard.{}.{}", k.first, k.second), sh->owned());
    if (!s.sharded)
      for (const auto& kv : s.model->named_parameters()) archive.write("param." + kv.key(), kv.value());
  }
  torch::serialize::OutputArchive optimizer;
  s.optimizer->save(optimizer);
  archive.write("optimizer", optimizer);
}

void ProgramExecutor::load(torch::serialize::InputArchive& archive) {
  Impl& s = *impl_;
  torch::NoGradGuard no_grad;
  auto read_into = [&](const std::string& key, torch::Tensor& target) {
    torch::Tensor t;
    archive.read(key, t);
    if (!t.defined() || t.sizes() != target.sizes())
      throw std::runtime_error(fmt::format("checkpoint: {} has shape {} where this run has {}", key,
                                           t.defined() ? c10::str(t.sizes()) : "none", c10::str(target.sizes())));
    target.copy_(t);
  };
  if (!s.buckets.sharded() || !s.sharded)
    for (auto& kv : s.model->named_parameters()) read_into("param." + kv.key(), kv.value());
  for (auto& [k, sh] : s.buckets.shards()) read_into(fmt::format("shard.{}.{}", k.first, k.second), sh->owned());
  torch::serialize::InputArchive optimizer;
  archive.read("optimizer", optimizer);
  s.optimizer->load(optimizer);  // the masters then take the loaded values
}

}  // namespace partune::backend
