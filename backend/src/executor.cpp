// The program executor (executor.hpp).
#include "partune/backend/executor.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "partune/backend/parameter_shards.hpp"

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

// Point-to-point tags: a pair of ranks can exchange both kinds in both directions
// (interleaved stages wrap around), and Gloo pairs messages per (peer, tag) in order.
constexpr int kActivationTag = 1, kGradientTag = 2;

using ChunkKey = std::pair<int, int>;         // (micro-batch, chunk)
using PartKey = std::tuple<int, int, int>;    // (micro-batch, chunk, first layer in the chunk)
using BucketKey = std::pair<int, int>;        // (chunk, layer in the chunk)

// What a forward left for its recompute and backward.
struct Part {
  int first = 0, count = 0;   // layers of the chunk covered: [first, first + count)
  bool embedding = false;     // starts with the embedding (input: the tokens)
  bool head = false;          // ends with the LM head and the loss
  bool checkpointed = false;  // recomputed later: the forward ran without autograd
  torch::Tensor input;        // a leaf requiring grad (undefined with the embedding)
  torch::Tensor host_input;   // offloaded copy of the input
  torch::Tensor output;       // end of the autograd graph (undefined with the head)
  torch::Tensor loss;         // with the head: the scaled loss
};

// Drops what a part kept once its backward (or its send) no longer needs it.
void free_tensors(Part& part) {
  part.input = torch::Tensor();
  part.host_input = torch::Tensor();
  part.output = torch::Tensor();
  part.loss = torch::Tensor();
}

// An asynchronous instruction in flight: its c10d work and what completes it.
struct Pending {
  c10::intrusive_ptr<c10d::Work> work;  // null: completed when started (a local copy)
  std::function<void()> finish;
};

}  // namespace

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void check_executable(const Job& job, const RankProgram& program) {
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
    if (ins.kind == OpKind::all_reduce && ins.group == CommGroup::tensor && ins.layer < 0 && sharded)
      throw UnsupportedInstruction(fmt::format("{}: chunk-granularity program", describe(ins, i)));
  }
}

struct ProgramExecutor::Impl {
  const Job& job;
  RankProgram program;
  GPTModel model;
  const Communicators* comms;
  int stage = 0, p = 1, v = 1, layers_per_chunk = 0, dp = 1, sdp = 1;
  bool head_first = false, sharded = false, zero1 = false;
  std::map<BucketKey, std::vector<torch::Tensor>> bucket_params;
  std::map<BucketKey, std::unique_ptr<ParameterShards>> shards;  // ZeRO-1 or sharded
  std::set<BucketKey> resident;  // sharded buckets kept gathered through the step (tied embedding)
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  torch::Tensor wte;  // this rank's tied token embedding (copy), when it syncs it

  // --- per step
  std::map<PartKey, Part> parts;
  std::map<ChunkKey, torch::Tensor> chunk_input;   // received activations (leaves)
  std::map<ChunkKey, torch::Tensor> output_grad;   // received gradients of chunk outputs
  std::map<int, Pending> pending;                  // by instruction index
  std::map<std::pair<int, int>, std::deque<torch::Tensor>> mailbox;  // (kind tag, chunk) -> self-sends
  const std::vector<MicroBatchData>* data = nullptr;
  double loss_sum = 0;
  int microbatches = 0;

  Impl(const Job& j, RankProgram prog, GPTModel m, const Communicators* c)
      : job(j), program(std::move(prog)), model(std::move(m)), comms(c) {
    const ParallelConfig& pc = job.parallel;
    stage = program.coords.pipeline;
    p = pc.pipeline_parallel_degree;
    v = pc.virtual_stages;
    layers_per_chunk = job.layers_per_chunk(stage);
    dp = job.data_parallel_degree();
    sdp = pc.sharded_data_parallel_degree;
    head_first = job.lm_head_on_first_stage();
    sharded = sdp > 1;
    zero1 = !sharded && pc.shard_optimizer_state && dp > 1;
    if (job.world_size() > 1 && !comms)
      throw std::invalid_argument("ProgramExecutor: a world of more than one rank needs communicators");
  }

  int model_stage(int chunk) const { return chunk * p + stage; }
  bool first_model_stage(int chunk) const { return model_stage(chunk) == 0; }
  bool last_model_stage(int chunk) const { return model_stage(chunk) == p * v - 1; }

  // The gradient buckets: one per layer, with the embedding beside layer 0 of the first
  // model stage and the head beside the last layer of the last one (on stage 0 with
  // lm_head_stage: first, beside layer 0), as the program's bucket sizes count them.
  void build_buckets() {
    for (int c = 0; c < v; ++c)
      for (int l = 0; l < layers_per_chunk; ++l) {
        std::vector<torch::Tensor> params = model->layer_parameters(job.global_layer(stage, c, l));
        auto add = [&](const std::vector<torch::Tensor>& extra) { params.insert(params.end(), extra.begin(), extra.end()); };
        if (l == 0 && first_model_stage(c)) add(model->embedding_parameters());
        if (head_first ? (l == 0 && first_model_stage(c)) : (l == layers_per_chunk - 1 && last_model_stage(c)))
          add(model->head_parameters());
        bucket_params[{c, l}] = std::move(params);
      }
  }

  const Communicator& group(CommGroup g) const { return comms->group(g); }
  int shard_degree() const { return sharded ? sdp : dp; }
  int shard_index() const { return group(sharded ? CommGroup::sharded : CommGroup::data).index; }

  void build_optimizer(const OptimizerSettings& settings) {
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
    if (settings.kind == Optimizer::adam)
      optimizer = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(settings.learning_rate));
    else
      optimizer = std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(settings.learning_rate));
    const bool tied_copies = job.model.tied_embeddings && p > 1 && !head_first && (stage == 0 || stage == p - 1);
    if (tied_copies) wte = model->wte;
  }

  // --- compute -------------------------------------------------------------------------

  Part make_part(const Instruction& ins) const {
    Part part;
    if (ins.chunk == v) {  // the head alone, on stage 0
      part.head = true;
      return part;
    }
    part.first = ins.layer < 0 ? 0 : ins.layer;
    part.count = ins.layer < 0 ? layers_per_chunk : std::max<int>(1, ins.layers);
    part.embedding = part.first == 0 && first_model_stage(ins.chunk);
    part.head = !head_first && last_model_stage(ins.chunk) && part.first + part.count == layers_per_chunk;
    return part;
  }

  // The part's layers (and embedding / head) from its input, with or without autograd.
  void run_part(Part& part, int mb, int chunk, bool with_grad) {
    std::unique_ptr<torch::NoGradGuard> no_grad;
    if (!with_grad) no_grad = std::make_unique<torch::NoGradGuard>();
    const MicroBatchData& d = (*data)[static_cast<std::size_t>(mb)];
    torch::Tensor x = part.embedding ? model->embed(d.tokens) : part.input;
    for (int l = part.first; l < part.first + part.count; ++l) x = model->layer(job.global_layer(stage, chunk, l), x);
    if (part.head) {
      const torch::Tensor raw = model->head_loss(x, d.targets);
      part.loss = raw / microbatches;
      part.output = torch::Tensor();
    } else {
      part.output = x;
    }
  }

  void forward(const Instruction& ins, std::size_t i, const std::set<PartKey>& recomputed) {
    const PartKey key{ins.microbatch, ins.chunk, ins.layer < 0 ? 0 : ins.layer};
    if (parts.count(key)) throw std::runtime_error(fmt::format("{}: this forward ran already", describe(ins, i)));
    Part part = make_part(ins);
    part.checkpointed = recomputed.count(key) > 0;
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
    parts.emplace(key, std::move(part));
  }

  template <class Pred>
  Part* find_part(int mb, int chunk, Pred pred) {
    for (auto& [k, part] : parts)
      if (std::get<0>(k) == mb && std::get<1>(k) == chunk && pred(part)) return &part;
    return nullptr;
  }

  Part& part_of(const Instruction& ins, std::size_t i, const char* what) {
    auto it = parts.find({ins.microbatch, ins.chunk, ins.layer < 0 ? 0 : ins.layer});
    if (it == parts.end()) throw std::runtime_error(fmt::format("{}: {} before its forward", describe(ins, i), what));
    return it->second;
  }

  void recompute(const Instruction& ins, std::size_t i) {
    Part& part = part_of(ins, i, "recompute");
    if (!part.embedding && !part.input.defined())
      throw std::runtime_error(fmt::format("{}: its input is offloaded and was not reloaded", describe(ins, i)));
    run_part(part, ins.microbatch, ins.chunk, true);
  }

  void backward(const Instruction& ins, std::size_t i) {
    Part& part = part_of(ins, i, "backward");
    if (part.head) {
      if (!part.loss.requires_grad())
        throw std::runtime_error(fmt::format("{}: checkpointed part not recomputed", describe(ins, i)));
      part.loss.backward();
    } else {
      torch::Tensor grad;
      Part* next = nullptr;
      if (part.first + part.count == layers_per_chunk) {
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
  }

  // --- point to point ------------------------------------------------------------------

  // The chunk whose output a send_activation / recv_gradient refers to: the head hop's
  // (chunk = virtual_stages) is the last chunk's output on the last stage.
  int output_chunk(const Instruction& ins) const { return ins.chunk == v ? v - 1 : ins.chunk; }

  torch::Tensor activation_buffer() const {
    const MicroBatchData& d = data->front();
    return torch::empty({d.tokens.size(0), d.tokens.size(1), static_cast<std::int64_t>(model->config.hidden)});
  }

  void send(const Instruction& ins, std::size_t i, torch::Tensor t, int tag) {
    t = t.detach().contiguous();
    if (ins.peer == program.rank) {
      mailbox[{tag, ins.chunk}].push_back(t);
      pending[static_cast<int>(i)] = Pending{};
      return;
    }
    std::vector<torch::Tensor> tensors{t};
    pending[static_cast<int>(i)] = Pending{comms->world().group->send(tensors, ins.peer, tag), [t] {}};
    if (!ins.async) finish(static_cast<int>(i));
  }

  torch::Tensor receive(const Instruction& ins, int tag) {
    if (ins.peer == program.rank) {
      auto& box = mailbox[{tag, ins.chunk}];
      if (box.empty()) throw std::runtime_error("a receive from this rank itself before its send");
      torch::Tensor t = box.front();
      box.pop_front();
      return t;
    }
    std::vector<torch::Tensor> tensors{activation_buffer()};
    comms->world().group->recv(tensors, ins.peer, tag)->wait();
    return tensors[0];
  }

  void send_activation(const Instruction& ins, std::size_t i) {
    const int chunk = output_chunk(ins);
    Part* last = find_part(ins.microbatch, chunk, [&](const Part& q) { return q.first + q.count == layers_per_chunk; });
    if (!last || !last->output.defined())
      throw std::runtime_error(fmt::format("{}: the chunk's forward has not run", describe(ins, i)));
    send(ins, i, last->output, kActivationTag);
  }

  void send_gradient(const Instruction& ins, std::size_t i) {
    Part* first = find_part(ins.microbatch, ins.chunk, [&](const Part& q) { return q.first == 0 && !q.embedding; });
    if (!first || !first->input.defined() || !first->input.grad().defined())
      throw std::runtime_error(fmt::format("{}: the chunk's backward has not run", describe(ins, i)));
    send(ins, i, first->input.grad(), kGradientTag);
    // The chunk's input and its gradient are no longer needed once sent.
    free_tensors(*first);
  }

  // --- collectives ---------------------------------------------------------------------

  void start(int index, c10::intrusive_ptr<c10d::Work> work, std::function<void()> done, bool async) {
    pending[index] = Pending{std::move(work), std::move(done)};
    if (!async) finish(index);
  }

  void finish(int index) {
    auto it = pending.find(index);
    if (it == pending.end()) return;
    Pending p = std::move(it->second);
    pending.erase(it);
    if (p.work) p.work->wait();
    if (p.finish) p.finish();
  }

  // Completes the asynchronous work that has finished, so its buffers (a gradient
  // bucket's flat copy, a reduce-scatter's packed gradients) go as soon as they can, as
  // DDP's completion hooks do, rather than at the program's wait before the optimizer.
  void reap_completed() {
    for (auto it = pending.begin(); it != pending.end();) {
      const int index = it->first;
      ++it;  // finish erases the entry
      const Pending& p = pending.at(index);
      if (p.work && p.work->isCompleted()) finish(index);
    }
  }

  static c10d::AllreduceOptions sum() {
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    return o;
  }

  void collective(const Instruction& ins, std::size_t i) {
    const int index = static_cast<int>(i);
    const BucketKey key{ins.chunk, ins.layer};
    switch (ins.group) {
      case CommGroup::tensor:
        return;  // run inside the layers (f and g): see the event handling in run()
      case CommGroup::data: {
        const auto& g = group(CommGroup::data);
        if (ins.kind == OpKind::all_reduce) {
          // A gradient bucket: summed, then averaged over the data-parallel replicas.
          std::vector<torch::Tensor>& params = bucket_params.at(key);
          std::vector<torch::Tensor> grads;
          for (torch::Tensor& prm : params) {
            if (!prm.grad().defined()) prm.mutable_grad() = torch::zeros_like(prm);
            grads.push_back(prm.grad().reshape(-1));
          }
          std::vector<torch::Tensor> flat{torch::cat(grads)};
          auto work = g.group->allreduce(flat, sum());
          start(index, work, [params, flat, n = dp]() mutable {
            torch::NoGradGuard no_grad;
            std::int64_t offset = 0;
            for (torch::Tensor& prm : params) {
              prm.mutable_grad().copy_(flat[0].narrow(0, offset, prm.numel()).view_as(prm) / n);
              offset += prm.numel();
            }
          }, ins.async);
        } else if (ins.kind == OpKind::reduce_scatter) {
          reduce_scatter(index, *shards.at(key), g, ins.async);
        } else {  // all_gather: the updated slices of every bucket, after the optimizer
          for (auto& [k, s] : shards) gather(-1, *s, g, false);
        }
        return;
      }
      case CommGroup::sharded: {
        ParameterShards& s = *shards.at(key);
        if (ins.kind == OpKind::all_gather) gather(index, s, group(CommGroup::sharded), ins.async);
        else reduce_scatter(index, s, group(CommGroup::sharded), ins.async);
        return;
      }
      case CommGroup::replica: {
        const auto& g = group(CommGroup::replica);
        for (auto& [k, s] : shards) {
          std::vector<torch::Tensor> t{s->owned().mutable_grad()};
          g.group->allreduce(t, sum())->wait();
        }
        return;
      }
      case CommGroup::embedding: {
        const auto& g = group(CommGroup::embedding);
        std::vector<torch::Tensor> t{embedding_gradient()};
        g.group->allreduce(t, sum())->wait();
        return;
      }
      case CommGroup::none: break;
    }
    throw std::runtime_error(fmt::format("{}: a collective without a group", describe(ins, i)));
  }

  // What this rank sums with the other copy of the tied embedding: the whole gradient,
  // or the owned slice of it when the optimizer state is sharded.
  torch::Tensor embedding_gradient() {
    if (!wte.defined()) throw std::runtime_error("embedding all-reduce on a rank without a tied embedding copy");
    if (shards.empty()) {
      if (!wte.grad().defined()) wte.mutable_grad() = torch::zeros_like(wte);
      return wte.mutable_grad();
    }
    for (auto& [k, s] : shards)
      for (std::size_t j = 0; j < s->params().size(); ++j)
        if (s->params()[j].unsafeGetTensorImpl() == wte.unsafeGetTensorImpl()) {
          const auto [offset, length] = s->owned_segment(j);
          return s->owned().mutable_grad().narrow(0, offset, length);
        }
    throw std::runtime_error("the tied embedding is in no gradient bucket");
  }

  // Gloo in LibTorch 1.13 has no reduce-scatter: an all-reduce of the packed gradients,
  // keeping this rank's row, under the instruction's name.
  void reduce_scatter(int index, ParameterShards& s, const Communicator& g, bool async) {
    std::vector<torch::Tensor> packed{s.pack_gradients()};
    for (const torch::Tensor& prm : s.params()) const_cast<torch::Tensor&>(prm).mutable_grad() = torch::Tensor();
    auto work = g.group->allreduce(packed, sum());
    ParameterShards* shard = &s;
    start(index, work, [shard, packed] { shard->owned().mutable_grad().add_(packed[0].select(0, shard->index())); },
          async);
  }

  void gather(int index, ParameterShards& s, const Communicator& g, bool async) {
    const torch::Tensor owned = s.owned().detach().contiguous();
    auto packed = std::make_shared<torch::Tensor>(torch::empty({s.degree(), owned.numel()}));
    std::vector<std::vector<torch::Tensor>> outputs(1);
    for (int k = 0; k < s.degree(); ++k) outputs[0].push_back(packed->select(0, k));
    std::vector<torch::Tensor> inputs{owned};
    auto work = g.group->allgather(outputs, inputs);
    ParameterShards* shard = &s;
    // The parameters' storage comes back only once the gathered rows are here: a
    // prefetched layer holds one copy of its weights in flight, not two.
    auto done = [shard, packed] {
      shard->materialise();
      shard->unpack_parameters(*packed);  // the outputs are its rows
    };
    if (index < 0) {
      work->wait();
      done();
    } else {
      start(index, work, done, async);
    }
  }

  // Sharded data parallelism: a layer's parameters go once its compute is over.
  void release_after(const Instruction& ins) {
    if (!sharded || ins.chunk == v) return;
    const BucketKey key{ins.chunk, ins.layer};
    if (!resident.count(key)) shards.at(key)->release();
  }

  // --- offload -------------------------------------------------------------------------

  void offload(const Instruction& ins, std::size_t i) {
    Part& part = part_of(ins, i, "offload");
    if (part.input.defined()) {
      part.host_input = part.input.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true);
      part.input = torch::Tensor();
    }
    pending[static_cast<int>(i)] = Pending{};
  }

  void reload(const Instruction& ins, std::size_t i) {
    Part& part = part_of(ins, i, "reload");
    if (part.host_input.defined()) {
      part.input = part.host_input.to(torch::kCPU, false, true).requires_grad_(true);
      part.host_input = torch::Tensor();
    }
    pending[static_cast<int>(i)] = Pending{};
  }

  // --- the step ------------------------------------------------------------------------

  void optimizer_step() {
    if (!shards.empty()) {
      // Slices hold gradient sums over the data-parallel replicas: average them.
      torch::NoGradGuard no_grad;
      for (auto& [k, s] : shards) s->owned().mutable_grad().div_(dp);
    }
    optimizer->step();
  }

  void zero_gradients() {
    if (shards.empty()) {
      optimizer->zero_grad();
      return;
    }
    torch::NoGradGuard no_grad;
    for (auto& [k, s] : shards) {
      s->owned().mutable_grad().zero_();
      for (const torch::Tensor& prm : s->params()) const_cast<torch::Tensor&>(prm).mutable_grad() = torch::Tensor();
    }
  }
};

ProgramExecutor::ProgramExecutor(const Job& job, RankProgram program, GPTModel model, const OptimizerSettings& settings,
                                 const Communicators* comms)
    : impl_(std::make_unique<Impl>(job, std::move(program), std::move(model), comms)) {
  check_executable(job, impl_->program);
  impl_->build_buckets();
  impl_->build_optimizer(settings);
}

ProgramExecutor::~ProgramExecutor() = default;

const RankProgram& ProgramExecutor::program() const { return impl_->program; }

StepOutcome ProgramExecutor::run(const std::vector<MicroBatchData>& data, std::vector<ExecutedEvent>* events,
                                 double t0) {
  Impl& s = *impl_;
  const RankProgram& program = s.program;
  std::set<PartKey> recomputed;
  std::set<int> microbatches;
  for (const Instruction& ins : program.ops) {
    if (ins.kind == OpKind::recompute) recomputed.insert({ins.microbatch, ins.chunk, ins.layer < 0 ? 0 : ins.layer});
    if (ins.microbatch >= 0) microbatches.insert(ins.microbatch);
  }
  const int m = static_cast<int>(microbatches.size());
  if (m == 0) throw std::runtime_error("program has no micro-batch");
  if (static_cast<int>(data.size()) != m || *microbatches.rbegin() != m - 1)
    throw std::runtime_error(
        fmt::format("program runs micro-batches 0..{} but {} were given", *microbatches.rbegin(), data.size()));
  s.data = &data;
  s.microbatches = m;
  s.loss_sum = 0;
  s.parts.clear();
  s.chunk_input.clear();
  s.output_grad.clear();
  s.mailbox.clear();
  s.zero_gradients();
  const TensorParallel& tp = s.model->shard.tensor;
  if (tp) tp->take_seconds();
  double tensor_seconds = 0;  // of the tensor collectives inside the last compute instruction
  bool head_ran = false;

  for (std::size_t i = 0; i < program.ops.size(); ++i) {
    const Instruction& ins = program.ops[i];
    if (!s.pending.empty()) s.reap_completed();
    const double start = monotonic_seconds();
    switch (ins.kind) {
      case OpKind::forward:
        s.forward(ins, i, recomputed);
        head_ran = head_ran || s.make_part(ins).head;
        s.release_after(ins);
        break;
      case OpKind::recompute: s.recompute(ins, i); break;
      case OpKind::backward:
        s.backward(ins, i);
        s.release_after(ins);
        break;
      case OpKind::send_activation: s.send_activation(ins, i); break;
      case OpKind::send_gradient: s.send_gradient(ins, i); break;
      case OpKind::recv_activation: {
        torch::Tensor t = s.receive(ins, kActivationTag);
        s.chunk_input[{ins.microbatch, ins.chunk}] = t.detach().requires_grad_(true);
        break;
      }
      case OpKind::recv_gradient:
        s.output_grad[{ins.microbatch, s.output_chunk(ins)}] = s.receive(ins, kGradientTag);
        break;
      case OpKind::all_reduce:
      case OpKind::all_gather:
      case OpKind::reduce_scatter: s.collective(ins, i); break;
      case OpKind::offload: s.offload(ins, i); break;
      case OpKind::reload: s.reload(ins, i); break;
      case OpKind::wait: s.finish(ins.wait_for); break;
      case OpKind::optimizer_step: s.optimizer_step(); break;
    }
    double end = monotonic_seconds();
    if (events) {
      ExecutedEvent e;
      e.rank = program.rank;
      e.kind = ins.kind;
      e.group = ins.group;
      e.microbatch = ins.microbatch;
      e.chunk = ins.chunk;
      e.layer = ins.layer;
      e.start = start - t0;
      e.end = end - t0;
      if (ins.group == CommGroup::tensor && !events->empty()) {
        // The tensor collectives ran inside the compute before: shown after it, with
        // their measured time, as the program orders them.
        ExecutedEvent& compute = events->back();
        e.end = compute.end;
        e.start = compute.end = std::max(compute.start, compute.end - tensor_seconds);
      }
      events->push_back(e);
    }
    if (is_compute(ins.kind)) tensor_seconds = tp ? tp->take_seconds() : 0.0;
  }
  while (!s.pending.empty()) s.finish(s.pending.begin()->first);
  if (s.sharded)
    for (auto& [k, sh] : s.shards) sh->release();
  s.parts.clear();
  StepOutcome out;
  out.has_loss = head_ran;
  out.loss = head_ran ? s.loss_sum / m : 0.0;
  out.microbatches = m;
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
}

}  // namespace partune::backend
