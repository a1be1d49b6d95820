// The program executor (executor.hpp): construction, gradient buckets, the optimizer,
// the step loop and sharded checkpoints. The steps themselves are in executor_*.cpp
// (executor_state.hpp lists them).
#include "partune/backend/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "device_clock.hpp"
#include "executor_state.hpp"
#include "partune/backend/memory_accounting.hpp"
#include "partune/backend/multi_tensor_adam.hpp"
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

Impl::Impl(const Job& j, RankProgram prog, GPTModel m, const Communicators* c)
    : job(j), program(std::move(prog)), model(std::move(m)), comms(c) {
  // The model's device and format: where it was moved after its initialisation (trainer.cpp).
  if (const auto ps = model->parameters(); !ps.empty()) {
    compute.device = ps.front().device();
    compute.dtype = ps.front().scalar_type();
  }
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

// The gradient buckets: one per layer, with the embedding and head parameters where the
// program's bucket sizes count them (bucket_extras).
void Impl::build_buckets() {
  for (int c = 0; c < v; ++c)
    for (int l = 0; l < std::max(1, layers(c)); ++l) {  // a chunk without layers: bucket 0, its extras
      const int layer = job.global_layer(stage, c, l);
      std::vector<torch::Tensor> params = layers(c) > 0 ? model->layer_parameters(layer) : std::vector<torch::Tensor>{};
      if (layers(c) > 0 && job.model.is_moe() && job.parallel.expert_parallel_degree > 1) {
        // The experts' gradients go over the expert-data group, in a bucket of their own.
        std::vector<torch::Tensor> experts = model->layer_expert_parameters(layer);
        std::set<const void*> theirs;
        for (const torch::Tensor& e : experts) theirs.insert(e.unsafeGetTensorImpl());
        params.erase(std::remove_if(params.begin(), params.end(),
                                    [&](const torch::Tensor& p) { return theirs.count(p.unsafeGetTensorImpl()) > 0; }),
                     params.end());
        if (!experts.empty()) expert_bucket_params[{c, l}] = std::move(experts);
      }
      auto add = [&](const std::vector<torch::Tensor>& extra) { params.insert(params.end(), extra.begin(), extra.end()); };
      const BucketExtras extras = bucket_extras(job, stage, c, l);
      if (extras.embedding) add(model->embedding_parameters());
      if (extras.head) add(model->head_parameters());
      bucket_params[{c, l}] = std::move(params);
    }
}

void Impl::build_optimizer(const OptimizerSettings& settings) {
  std::vector<torch::Tensor> params;
  if (zero1 || sharded) {
    for (auto& [key, ps] : bucket_params) {
      shards[key] = std::make_unique<ParameterShards>(ps, shard_degree(), shard_index());
      params.push_back(shards[key]->owned());
    }
    if (sharded) {
      // The tied embedding, used by the embedding and the head of the same rank, stays
      // gathered for the whole step (its bucket cannot be freed between the two uses).
      const bool both = model->shard.embedding && model->shard.head && job.model.tied_embeddings;
      for (auto& [key, s] : shards) {
        if (both && key == BucketKey{0, 0}) resident.insert(key);
        else s->release();
      }
    }
  } else {
    params = model->parameters();
  }
  masters_on_device = !job.parallel.offload_optimizer && compute.dtype != torch::kFloat;
  if (job.parallel.offload_optimizer || masters_on_device) {
    // The optimizer's fp32 copies (and, stepping them, its state): host memory with
    // offload_optimizer (and with offload_parameters so is the shard the gathers start
    // from), else the device's.
    std::optional<HostMemoryScope> host;
    if (!masters_on_device) host.emplace();
    torch::NoGradGuard no_grad;
    model_params = params;
    const torch::Device where = masters_on_device ? compute.device : torch::Device(torch::kCPU);
    for (torch::Tensor& d : model_params) {
      torch::Tensor h = d.detach().to(where, torch::kFloat, /*non_blocking=*/false, /*copy=*/true).set_requires_grad(true);
      h.mutable_grad() = torch::zeros_like(h);
      master_params.push_back(h);
      if (job.parallel.offload_parameters) d.set_data(d.detach().clone());
    }
    params = master_params;
  }
  const auto adam = torch::optim::AdamOptions(settings.learning_rate);
  // PARTUNE_ADAM=per-tensor: LibTorch's per-tensor loop (the device check's comparison).
  const char* loop = std::getenv("PARTUNE_ADAM");
  if (loop && *loop && std::string(loop) != "per-tensor" && std::string(loop) != "multi-tensor")
    throw std::runtime_error(fmt::format("PARTUNE_ADAM={}: expected per-tensor or multi-tensor", loop));
  if (settings.kind == Optimizer::adam && loop && std::string(loop) == "per-tensor")
    optimizer = std::make_unique<torch::optim::Adam>(params, adam);
  else if (settings.kind == Optimizer::adam)
    optimizer = std::make_unique<MultiTensorAdam>(params, adam);
  else
    optimizer = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(settings.learning_rate));
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
    for (auto& [key, params] : expert_bucket_params)
      for (torch::Tensor& prm : params)
        if (prm.grad().defined()) prm.mutable_grad().div_(dp);
  }
  // Masters on the device: no program instruction moves their gradients (offload's do).
  if (masters_on_device) offload_gradients();
  if (!shards.empty()) {
    // Slices hold gradient sums over the data-parallel replicas: average them.
    torch::NoGradGuard no_grad;
    if (master_params.empty()) {
      for (auto& [k, s] : shards) s->owned().mutable_grad().div_(dp);
    } else {
      for (torch::Tensor& h : master_params) h.mutable_grad().div_(dp);
    }
  }
  if (master_params.empty() || masters_on_device) {
    optimizer->step();
  } else {
    HostMemoryScope host;  // the optimizer state is created and stepped on the host
    optimizer->step();
  }
  // With offload_parameters the updated shard stays on the host: the owned slices (the
  // host copy the gathers start from) take it without a reload instruction. Masters on
  // the device: the model takes their values in its own format.
  if (job.parallel.offload_parameters || masters_on_device) sync_model_from_masters();
  // The masters' fp32 gradients live only through the step: 4 bytes a parameter that the
  // cost model's 2 + 2 + 12 does not hold between steps (the model's own gradients are the 2).
  if (masters_on_device)
    for (torch::Tensor& m : master_params) m.mutable_grad() = torch::Tensor();
}

// The gradients the optimizer will use, model -> masters (device -> host with
// offload_optimizer; to fp32 with mixed precision).
void Impl::offload_gradients() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < model_params.size(); ++i) {
    const torch::Tensor& g = model_params[i].grad();
    torch::Tensor& mg = master_params[i].mutable_grad();
    if (masters_on_device && !mg.defined() && g.defined()) {  // fp32 from the model's format, one pass
      mg = g.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
      continue;
    }
    if (!mg.defined()) mg = torch::zeros_like(master_params[i]);  // LibTorch 2's zero_grad sets none
    if (g.defined()) mg.copy_(g);
    else mg.zero_();
  }
}

// host -> device: the updated values after a host step (no layer), or with
// offload_parameters a layer's shard staged for its all-gather.
void Impl::reload_parameters(const Instruction& ins) {
  torch::NoGradGuard no_grad;
  if (ins.microbatch < 0) {  // after the host step
    sync_model_from_masters();
    return;
  }
  staged[{ins.chunk, ins.layer}] = shards.at({ins.chunk, ins.layer})->owned().detach().clone();
}

void Impl::sync_model_from_masters() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < model_params.size(); ++i) model_params[i].copy_(master_params[i]);
}

// The host copies take the device's values (at the start, and after a checkpoint loads).
void Impl::sync_master_params() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < model_params.size(); ++i) master_params[i].copy_(model_params[i]);
}

void Impl::zero_gradients() {
  if (shards.empty()) {
    optimizer->zero_grad();  // the host copies' gradients with offload_optimizer; the model's too
    for (torch::Tensor& d : model_params)
      if (d.grad().defined()) d.mutable_grad().zero_();
    return;
  }
  torch::NoGradGuard no_grad;
  for (auto& [k, s] : shards) {
    s->owned().mutable_grad().zero_();
    for (const torch::Tensor& prm : s->params()) const_cast<torch::Tensor&>(prm).mutable_grad() = torch::Tensor();
  }
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
    case OpKind::offload_gradients: offload_gradients(); break;
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
  impl_->build_buckets();
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
  s.mailbox.clear();
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
    if (is_compute(ins.kind)) s.post_early_receives(program.ops, i);
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
  if (s.sharded)
    for (auto& [k, sh] : s.shards) sh->release();
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
  if (s.shards.empty()) {
    for (const auto& kv : s.model->named_parameters()) archive.write("param." + kv.key(), kv.value());
  } else {
    for (auto& [k, sh] : s.shards) archive.write(fmt::format("shard.{}.{}", k.first, k.second), sh->owned());
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
  if (s.shards.empty() || !s.sharded)
    for (auto& kv : s.model->named_parameters()) read_into("param." + kv.key(), kv.value());
  for (auto& [k, sh] : s.shards) read_into(fmt::format("shard.{}.{}", k.first, k.second), sh->owned());
  torch::serialize::InputArchive optimizer;
  archive.read("optimizer", optimizer);
  s.optimizer->load(optimizer);
  s.sync_master_params();
}

}  // namespace partune::backend
