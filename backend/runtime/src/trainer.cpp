// Job -> this rank's model shard, optimizer, tokens, program, process groups; one step
// per call (trainer.hpp).
#include "partune/backend/trainer.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "partune/backend/checkpoint.hpp"
#include "partune/backend/communicators.hpp"
#include "partune/backend/compute_device.hpp"
#include "partune/backend/conjugates.hpp"
#include "partune/backend/executor.hpp"
#include "partune/backend/gpt_model.hpp"
#include "partune/backend/memory_accounting.hpp"
#include "partune/backend/token_source.hpp"
#include "partune/backend/watchdog.hpp"
#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/program_builder.hpp"

namespace partune::backend {

namespace {

ProgramOptions layer_programs() {
  ProgramOptions po;
  po.granularity = Granularity::layer;  // what the backend runs (docs/architecture.md 2.5)
  return po;
}

// The checkpoint's layout: what must match for a shard to load into this run.
nlohmann::json layout_of(const Job& job) {
  const ParallelConfig& pc = job.parallel;
  const ModelSpec& c = job.model;
  return {{"world_size", job.world_size()},
          {"pipeline_parallel_degree", pc.pipeline_parallel_degree},
          {"tensor_parallel_degree", pc.tensor_parallel_degree},
          {"data_parallel_degree", job.data_parallel_degree()},
          {"sharded_data_parallel_degree", pc.sharded_data_parallel_degree},
          {"shard_optimizer_state", pc.shard_optimizer_state},
          {"virtual_stages", pc.virtual_stages},
          {"placement", pc.placement_strategy.name()},
          {"stage_layers", pc.stage_layers},
          {"lm_head_stage", to_string(pc.lm_head_stage)},
          {"optimizer", to_string(job.training.optimizer)},
          {"model",
           {{"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads}, {"kv_heads", c.kv_heads},
            {"ffn_hidden", c.ffn_hidden}, {"vocab", c.vocab}, {"seq_len", c.seq_len},
            {"tied_embeddings", c.tied_embeddings}, {"mlp", enum_name(c.mlp)}, {"norm", enum_name(c.norm)},
            {"positions", enum_name(c.positions)}, {"bias", c.bias}}}};
}

// "world 2 = pipeline 1 x tensor 1 x data 2": a layout in the words of the job.
std::string layout_text(const nlohmann::json& l) {
  const auto v = [&](const char* key) { return l.contains(key) ? l[key].dump() : std::string("?"); };
  return fmt::format("world {} = pipeline {} x tensor {} x data {}", v("world_size"), v("pipeline_parallel_degree"),
                     v("tensor_parallel_degree"), v("data_parallel_degree"));
}

// Empty when the checkpoint of `step` in DIR was saved with layout `ours`; else one line
// naming the directory, the layout the checkpoint holds, this run's, and the first key
// that differs.
std::string layout_mismatch(const std::string& dir, int step, const nlohmann::json& meta, const nlohmann::json& ours) {
  const nlohmann::json theirs = meta.value("layout", nlohmann::json::object());
  for (auto it = ours.begin(); it != ours.end(); ++it)
    if (!theirs.contains(it.key()) || theirs[it.key()] != it.value())
      return fmt::format("--resume {}: the checkpoint of step {} holds the layout {} ({} = {}); this run's is {} ({} = {})",
                         dir, step, layout_text(theirs), it.key(),
                         theirs.contains(it.key()) ? theirs[it.key()].dump() : "none", layout_text(ours), it.key(),
                         it.value().dump());
  return {};
}

}  // namespace

std::string why_not_resumable(const Job& original, const RunOptions& options, const std::string& dir) {
  try {
    const std::optional<int> step = latest_checkpoint_step(dir);
    if (!step) return fmt::format("--resume {}: no checkpoint there (no 'latest' file)", dir);
    return layout_mismatch(dir, *step, read_checkpoint_meta(dir, *step), layout_of(scaled_job(original, options.scale)));
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string why_not_runnable(const Job& original, const RunOptions& options) {
  Job job;
  try {
    job = scaled_job(original, options.scale);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  const ModelSpec& ran = job.model;  // the model that runs
  if (const JobViolation v = check_job(job)) return fmt::format("{}: {}", v.key, v.reason);
  if (std::string why = why_not_on_device(options.device, job.training.precision); !why.empty()) return why;
  if (original.model.has_mtp())
    return "multi-token prediction (model.mtp_layers) is priced by the cost model and the simulator but not run by "
           "the LibTorch backend: set mtp_layers: 0 (and leave the 'm' out of parallel.pipeline_layout)";
  if (job.training.moment_precision != Precision::fp32) return "moment_precision: the LibTorch backend keeps fp32 moments";
  const int t = job.parallel.tensor_parallel_degree;
  for (const auto& [name, n] : {std::pair<const char*, int>{"heads", ran.heads}, {"hidden", ran.hidden},
                                {"ffn_hidden", ran.ffn_hidden}, {"vocab", ran.vocab}})
    if (n % t != 0)
      return fmt::format("tensor_parallel_degree {} does not divide the model's {} ({}) that runs (see --scale-*)", t,
                         name, n);
  // The cost model lets fewer key/value heads than tensor ranks be replicated; the
  // backend splits them, as Megatron does (its query groups divisible by the degree).
  if (ran.kv_heads % t != 0)
    return fmt::format("tensor_parallel_degree {} does not divide the model's kv_heads ({}) that runs: the backend "
                       "splits the key/value heads over the tensor group, it does not replicate them",
                       t, ran.kv_heads);
  if (job.parallel.context_parallel_degree > 1 && job.parallel.flash_attention)
    return "context parallelism with flash_attention is not run by the LibTorch backend (its kernels take one "
           "aligned causal mask): set flash_attention: false";
  if ((ran.sliding_window > 0 || ran.attention_sinks) &&
      (job.parallel.flash_attention || job.parallel.context_parallel_degree > 1 || job.model.is_mla()))
    return fmt::format("{} with {} is not run by the LibTorch backend",
                       ran.sliding_window > 0 ? "a sliding window" : "attention sinks",
                       job.parallel.flash_attention ? "flash_attention (set flash_attention: false)"
                       : job.model.is_mla()         ? "multi-head latent attention"
                                                    : "context parallelism");
  if (job.parallel.context_parallel_degree > 1 && job.parallel.cp_comm_type == ContextComm::a2a_p2p)
    return "cp_comm_type a2a+p2p is priced by the cost model and the simulator but not run by the LibTorch backend "
           "(p2p, a2a and allgather are)";
  if (job.parallel.context_parallel_degree > 1 && job.model.is_mla())
    return "context parallelism around multi-head latent attention is not run by the LibTorch backend";
  // tp_comm_overlap runs its chunked GEMMs in the model's format (overlapped_linear.hpp).
  if (job.parallel.tp_comm_overlap && t > 1 && job.training.precision == Precision::fp8)
    return "tp_comm_overlap with precision fp8 is not run by the LibTorch backend: its GEMMs beside the chunked "
           "collectives are not fp8 GEMMs (set tp_comm_overlap: false, or precision bf16)";
  if (job.model.is_moe() && job.parallel.sequence_parallel && t > 1 && job.parallel.expert_parallel_degree <= 1)
    return "sequence parallelism around a mixture of experts without expert parallelism is not run by the LibTorch "
           "backend (its program names no expert-tensor group to gather the routed rows over)";
  if (job.parallel.activation_checkpointing == Checkpointing::selective &&
      job.parallel.recompute_modules != kDefaultRecomputeModules)
    return "recompute_modules other than core_attn (Megatron's selective recomputation by module) are not run by "
           "the LibTorch backend";
  if (job.model.is_moe() && job.parallel.moe_a2a_overlap)
    return "moe_a2a_overlap (Megatron's overlapped expert exchanges) is not run by the LibTorch backend";
  if (job.model.is_moe() && job.parallel.moe_token_dispatcher != MoeDispatcher::alltoall)
    return fmt::format("moe_token_dispatcher {} is not run by the LibTorch backend",
                       enum_name(job.parallel.moe_token_dispatcher));
  if (job.model.is_moe() && job.parallel.expert_parallel_degree > 1 && job.parallel.shard_optimizer_state)
    return "optimizer-state sharding with expert parallelism is not run by the LibTorch backend";
  const int m = job.parallel.microbatches * job.training.gradient_accumulation;
  const int b = job.microbatch_size();
  if (b < 1 || b * m * job.data_parallel_degree() != job.training.global_batch)
    return fmt::format("global batch {} does not split into {} data-parallel ranks x {} micro-batches",
                       job.training.global_batch, job.data_parallel_degree(), m);
  if (options.environment && options.environment->world_size != job.world_size())
    return fmt::format("job '{}' has world size {} (pipeline {} x tensor {} x data {}) but WORLD_SIZE is {}", job.name,
                       job.world_size(), job.parallel.pipeline_parallel_degree, t, job.data_parallel_degree(),
                       options.environment->world_size);
  if (!options.environment && job.world_size() > 1)
    return fmt::format("job '{}' has world size {}: start it with --nproc {} or from a launcher (RANK, WORLD_SIZE, ...)",
                       job.name, job.world_size(), job.world_size());
  for (int r = 0; r < job.world_size(); ++r) {
    try {
      check_executable(job, build_program(job, r, layer_programs()));
    } catch (const std::exception& e) {
      return fmt::format("rank {}: {}", r, e.what());
    }
  }
  return {};
}

struct Trainer::Impl {
  RunOptions options;
  Job job;  // the job as it runs: its model scaled (scaled_job)
  RankProgram program;
  RankEnvironment env;
  ComputeDevice compute;
  bool distributed = false;
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::unique_ptr<Communicators> comms;
  std::unique_ptr<Watchdog> watchdog;
  std::unique_ptr<TokenSource> tokens;
  GPTModel model{nullptr};
  std::unique_ptr<ProgramExecutor> executor;
  std::vector<TraceEvent> events;
  double t0 = 0;
  double lr = 0;
  int steps_done = 0;
  int microbatches = 0, microbatch_size = 0, threads = 1;
  bool finished = false;
  bool warned_unbooked = false;

  // Runs a collective part of the run. When it fails because a peer's connection broke
  // (a dead rank), the watchdog is given the time to learn which rank died (the
  // launcher's verdict within half a second, a missing heartbeat within its stale time)
  // and to stop this process naming it; any other error is this rank's own, and the
  // other ranks are told at once instead of timing out in a collective.
  template <class F>
  auto guarded(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const std::exception& e) {
      if (watchdog) {
        const std::string what = e.what();
        if (what.find("gloo") != std::string::npos || what.find("Connection") != std::string::npos)
          std::this_thread::sleep_for(WatchdogOptions{}.stale_after + std::chrono::seconds(2));
        watchdog->report_failure(fmt::format("rank {}: {}", env.rank, what));
      }
      throw;
    }
  }

  void barrier() {
    if (distributed) comms->world().group->barrier()->wait();
  }
  // Sum (or max) of one value over every rank.
  double reduce(double value, c10d::ReduceOp op) {
    if (!distributed) return value;
    std::vector<torch::Tensor> t{torch::full({1}, value, torch::kDouble)};
    c10d::AllreduceOptions o;
    o.reduceOp = op;
    comms->world().group->allreduce(t, o)->wait();
    return t[0].item<double>();
  }
  // Every rank's one row, on every rank.
  torch::Tensor gather_step_rows(const torch::Tensor& row) {
    if (!distributed) return row;
    std::vector<std::vector<torch::Tensor>> out(1);
    for (int r = 0; r < comms->world_size(); ++r) out[0].push_back(torch::empty_like(row));
    std::vector<torch::Tensor> in{row.contiguous()};
    comms->world().group->allgather(out, in)->wait();
    return torch::cat(out[0]);
  }
  // Every rank's rows of a [n, width] double tensor, on every rank (n may differ).
  torch::Tensor gather_rows(const torch::Tensor& rows) {
    if (!distributed) return rows;
    const int world = comms->world_size();
    const std::int64_t width = rows.size(1);
    const std::int64_t longest = static_cast<std::int64_t>(reduce(static_cast<double>(rows.size(0)), c10d::ReduceOp::MAX));
    torch::Tensor padded = torch::full({longest + 1, width}, -1.0, torch::kDouble);
    padded[0][0] = static_cast<double>(rows.size(0));
    if (rows.size(0) > 0) padded.narrow(0, 1, rows.size(0)).copy_(rows);
    std::vector<std::vector<torch::Tensor>> out(1);
    for (int r = 0; r < world; ++r) out[0].push_back(torch::empty_like(padded));
    std::vector<torch::Tensor> in{padded};
    comms->world().group->allgather(out, in)->wait();
    std::vector<torch::Tensor> parts;
    for (const torch::Tensor& t : out[0]) parts.push_back(t.narrow(0, 1, static_cast<std::int64_t>(t[0][0].item<double>())));
    return torch::cat(parts);
  }
};

Trainer::Trainer(const Job& original, const RunOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  const std::string why = why_not_runnable(original, options);
  s.distributed = options.environment.has_value() && options.environment->world_size > 1;
  const std::chrono::milliseconds timeout(std::int64_t{1000} * options.collective_timeout_s);
  // The rendezvous first (bounded, communicators.hpp): a rank that cannot run tells the
  // others, and a WORLD_SIZE mismatch is named as such, instead of leaving them waiting.
  if (s.distributed)
    s.store = join_rendezvous(*options.environment, timeout, why);
  else if (!why.empty())
    throw std::runtime_error(why);
  s.options = options;
  s.job = scaled_job(original, options.scale);
  if (options.environment) s.env = *options.environment;
  s.microbatches = s.job.parallel.microbatches * s.job.training.gradient_accumulation;
  s.microbatch_size = s.job.microbatch_size();
  s.threads = options.threads > 0 ? options.threads : default_threads(s.env.local_world_size);
  torch::set_num_threads(s.threads);
  install_cpu_memory_accounting();
  s.compute = compute_device(options.device, s.job.training.precision, s.env.local_rank);

  if (s.distributed) {
    s.watchdog = std::make_unique<Watchdog>(s.env);
    s.comms = std::make_unique<Communicators>(s.job, s.env.rank, s.store, timeout, s.compute.device,
                                              s.env.local_world_size);
  }
  s.program = build_program(s.job, s.env.rank, layer_programs());

  // This rank's shard of the model: its stage's layers, the embedding on stage 0, the
  // head on the stage that runs it, split over its tensor group.
  const ParallelConfig& pc = s.job.parallel;
  const int stage = s.program.coords.pipeline;
  ModelShard shard;
  for (int c = 0; c < pc.virtual_stages; ++c)
    for (int l = 0; l < s.job.layers_in_chunk(stage, c); ++l) shard.layers.push_back(s.job.global_layer(stage, c, l));
  std::sort(shard.layers.begin(), shard.layers.end());
  shard.embedding = stage == 0;
  shard.head = stage == s.job.lm_head_stage();  // the last, or the first (head first, or a V)
  shard.conjugates = layer_conjugates(s.job);  // the region edges, as the layer plan states them
  if (pc.tensor_parallel_degree > 1) {
    const Communicator& tensor = s.comms->tensor();
    shard.tensor = std::make_shared<TensorParallelGroup>(tensor.group, tensor.size(), tensor.index);
  }
  if (s.job.model.is_moe() && pc.expert_parallel_degree > 1) {
    const Communicator& expert = s.comms->group(CommGroup::expert);
    TensorParallel folded;  // MoE parallel folding: the experts' own tensor group
    if (s.job.expert_tensor_degree() != pc.tensor_parallel_degree) {
      const Communicator& et = s.comms->group(CommGroup::expert_tensor);
      folded = et.size() > 1 ? std::make_shared<TensorParallelGroup>(et.group, et.size(), et.index)
                             : std::make_shared<TensorParallelGroup>();
    }
    shard.expert = std::make_shared<ExpertParallelGroup>(expert.group, expert.size(), expert.index, folded);
  }
  if (pc.context_parallel_degree > 1) {
    const Communicator& context = s.comms->group(CommGroup::context);
    shard.context = std::make_shared<ContextParallelGroup>(context.group, context.size(), context.index, pc.cp_comm_type);
  }
  s.model = GPTModel(s.job.model, options.seed, shard, pc.flash_attention);
  // Initialised on the CPU in fp32 (the same numbers on every device), then moved.
  if (s.compute.cuda() || s.compute.dtype != torch::kFloat) s.model->to(s.compute.device, s.compute.dtype);

  s.tokens = options.data_file.empty() ? std::make_unique<TokenSource>(options.seed, s.job.model.vocab)
                                       : std::make_unique<TokenSource>(options.seed, s.job.model.vocab, options.data_file);
  const bool adam = s.job.training.optimizer == Optimizer::adam;
  s.lr = options.learning_rate > 0 ? options.learning_rate : adam ? 1e-3 : 0.1;
  s.executor = std::make_unique<ProgramExecutor>(s.job, s.program, s.model,
                                                 OptimizerSettings{s.job.training.optimizer, s.lr}, s.comms.get());
  s.barrier();  // every rank starts its clock together
  s.t0 = monotonic_seconds();
}

Trainer::~Trainer() = default;

StepReport Trainer::step() { return impl_->guarded([this] { return run_step(); }); }

StepReport Trainer::run_step() {
  Impl& s = *impl_;
  const int seq = s.job.model.seq_len;
  const int sequences = s.job.training.global_batch;
  std::vector<std::int64_t> flat = s.tokens->batch(s.steps_done, sequences, seq);
  const torch::Tensor batch = torch::from_blob(flat.data(), {sequences, seq + 1}, torch::kLong).clone();
  // Data-parallel rank d trains on sequences [d B / dp, (d + 1) B / dp), in micro-batches;
  // with context parallelism (the data axis is data x context, context fastest) its
  // context rank takes its tokens' columns of them (ContextParallelGroup::positions).
  const int per_replica = s.microbatches * s.microbatch_size;
  const int cp = s.job.parallel.context_parallel_degree, replica = s.program.coords.data / cp;
  const torch::Tensor mine = batch.narrow(0, static_cast<std::int64_t>(replica) * per_replica, per_replica);
  const ContextParallel& context = s.model->shard.context;
  const torch::Tensor inputs_at = context ? context->positions(seq) : torch::arange(seq, torch::kLong);
  std::vector<MicroBatchData> data;
  for (int i = 0; i < s.microbatches; ++i) {
    const torch::Tensor rows = mine.narrow(0, static_cast<std::int64_t>(i) * s.microbatch_size, s.microbatch_size);
    data.push_back({rows.index_select(1, inputs_at).contiguous().to(s.compute.device),
                    rows.index_select(1, inputs_at + 1).contiguous().to(s.compute.device)});
  }
  synchronize(s.compute);
  reset_peak_memory(s.compute);
  const double start = monotonic_seconds();
  const StepOutcome out = s.executor->run(data, s.options.record_events ? &s.events : nullptr, s.t0);
  synchronize(s.compute);
  const double seconds = monotonic_seconds() - start;
  if (out.unbooked_tensor_calls > 0 && !s.warned_unbooked) {
    // The layers and the program disagree on the tensor collectives (layer_plan.hpp owns both).
    std::fprintf(stderr, "rank %d: %d tensor-parallel calls of step %d stand for no tensor instruction of the program\n",
                 s.env.rank, out.unbooked_tensor_calls, s.steps_done + 1);
    s.warned_unbooked = true;
  }
  const double peak = static_cast<double>(peak_memory_bytes(s.compute));
  ++s.steps_done;

  // The batch's loss: the mean over the data-parallel replicas of what each one's head
  // computed (one rank of each tensor group reports it). One gather of every rank's
  // (loss, reports, seconds, peak) row: a single extra synchronisation per step.
  const bool reports_loss = out.has_loss && (!s.distributed || s.comms->tensor().index == 0);
  const torch::Tensor mine_row =
      torch::tensor({reports_loss ? out.loss : 0.0, reports_loss ? 1.0 : 0.0, seconds, peak}, torch::kDouble).view({1, 4});
  const torch::Tensor rows = s.gather_step_rows(mine_row);
  StepReport r;
  r.step = s.steps_done;
  r.loss = rows.select(1, 0).sum().item<double>() / std::max(1.0, rows.select(1, 1).sum().item<double>());
  r.seconds = rows.select(1, 2).max().item<double>();
  r.samples_per_s = r.seconds > 0 ? sequences / r.seconds : 0;
  for (std::int64_t i = 0; i < rows.size(0); ++i) r.peak_bytes.push_back(rows[i][3].item<double>());
  return r;
}

void Trainer::save(const std::string& dir) {
  impl_->guarded([&] { save_checkpoint(dir); });
}

void Trainer::save_checkpoint(const std::string& dir) {
  Impl& s = *impl_;
  write_rank_shard(dir, s.steps_done, s.env.rank,
                   [&](torch::serialize::OutputArchive& archive) { s.executor->save(archive); });
  s.barrier();
  if (s.env.rank == 0) commit_checkpoint(dir, s.steps_done, s.job.world_size(), layout_of(s.job));
  s.barrier();
}

int Trainer::resume(const std::string& dir) {
  Impl& s = *impl_;
  const std::optional<int> step = latest_checkpoint_step(dir);
  if (!step) throw std::runtime_error(fmt::format("--resume {}: no checkpoint there (no 'latest' file)", dir));
  const nlohmann::json meta = read_checkpoint_meta(dir, *step);
  if (const std::string why = layout_mismatch(dir, *step, meta, layout_of(s.job)); !why.empty())
    throw std::runtime_error(why);
  read_rank_shard(dir, *step, s.env.rank, [&](torch::serialize::InputArchive& archive) { s.executor->load(archive); });
  s.steps_done = *step;
  s.barrier();
  return *step;
}

void Trainer::finish() {
  impl_->guarded([&] { finish_run(); });
}

void Trainer::finish_run() {
  Impl& s = *impl_;
  if (s.finished) return;
  s.finished = true;
  if (s.distributed && s.options.record_events) {
    // Every rank's events on every rank (rank 0 writes the trace).
    constexpr int kWidth = 10;
    torch::Tensor rows = torch::empty({static_cast<std::int64_t>(s.events.size()), kWidth}, torch::kDouble);
    for (std::size_t i = 0; i < s.events.size(); ++i) {
      const TraceEvent& e = s.events[i];
      const double v[kWidth] = {double(e.rank),       double(static_cast<int>(e.kind)), double(static_cast<int>(e.group)),
                                double(e.microbatch), double(e.chunk),                  double(e.layer),
                                e.start,              e.end,                            double(e.stream),
                                double(e.count)};
      for (int k = 0; k < kWidth; ++k) rows[static_cast<std::int64_t>(i)][k] = v[k];
    }
    const torch::Tensor all = s.gather_rows(rows);
    s.events.clear();
    for (std::int64_t i = 0; i < all.size(0); ++i) {
      const auto a = all[i];
      TraceEvent e;
      e.rank = static_cast<int>(a[0].item<double>());
      e.kind = static_cast<OpKind>(static_cast<int>(a[1].item<double>()));
      e.group = static_cast<CommGroup>(static_cast<int>(a[2].item<double>()));
      e.microbatch = static_cast<int>(a[3].item<double>());
      e.chunk = static_cast<int>(a[4].item<double>());
      e.layer = static_cast<int>(a[5].item<double>());
      e.start = a[6].item<double>();
      e.end = a[7].item<double>();
      e.stream = static_cast<int>(a[8].item<double>());
      e.count = static_cast<int>(a[9].item<double>());
      s.events.push_back(e);
    }
  }
  // Done before the last barrier: once a rank is through it, it may exit, and with an
  // external launcher rank 0's exit takes the store with it; a peer whose watchdog still
  // ran would take that for a failure.
  if (s.watchdog) s.watchdog->finish();
  s.barrier();
}

int Trainer::rank() const { return impl_->env.rank; }
int Trainer::world_size() const { return impl_->job.world_size(); }
const Job& Trainer::job() const { return impl_->job; }
const RankProgram& Trainer::program() const { return impl_->program; }
std::string Trainer::data_description() const { return impl_->tokens->describe(); }
std::string Trainer::optimizer_description() const {
  return fmt::format("{} (lr {})", impl_->job.training.optimizer == Optimizer::adam ? "Adam" : "SGD", impl_->lr);
}
int Trainer::threads() const { return impl_->threads; }
std::string Trainer::device_description() const {
  const Impl& s = *impl_;
  std::string d = fmt::format("LibTorch {}, {}", TORCH_VERSION, s.compute.describe());
  if (s.comms) d += fmt::format(", {}{}", to_string(s.comms->backend()),
                                s.comms->stages_transfers_through_host() ? " (transfers through host memory)" : "");
  return d;
}
const std::vector<TraceEvent>& Trainer::events() const { return impl_->events; }

}  // namespace partune::backend
