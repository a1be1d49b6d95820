// Job -> model, optimizer, tokens, program; one step per call (trainer.hpp).
#include "partune/backend/trainer.hpp"

#include <stdexcept>

#include <fmt/format.h>
#include <torch/torch.h>

#include "partune/backend/executor.hpp"
#include "partune/backend/gpt_model.hpp"
#include "partune/backend/token_source.hpp"

namespace partune::backend {

std::string why_not_runnable(const Job& job) {
  if (job.world_size() == 1) return {};
  return fmt::format(
      "multi-rank execution is not built yet: job '{}' has world size {} (pipeline {} x tensor {} x data {}); "
      "partune run executes single-rank jobs (one GPU in the cluster) only",
      job.name, job.world_size(), job.parallel.pipeline_parallel_degree, job.parallel.tensor_parallel_degree,
      job.data_parallel_degree());
}

struct Trainer::Impl {
  RunOptions options;
  BackendModelConfig config;
  Job job;
  RankProgram program;
  std::unique_ptr<TokenSource> tokens;
  GPTModel model{nullptr};
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  std::unique_ptr<ProgramExecutor> executor;
  std::vector<ExecutedEvent> events;
  double t0 = 0;
  double lr = 0;
  int steps_done = 0;
  int microbatches = 0, microbatch_size = 0;
};

Trainer::Trainer(const Job& original, const RunOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  if (const std::string why = why_not_runnable(original); !why.empty()) throw std::runtime_error(why);
  s.options = options;
  s.config = scaled_model(original.model, options.scale);
  s.job = scaled_job(original, s.config);
  s.microbatches = s.job.parallel.microbatches * s.job.training.gradient_accumulation;
  s.microbatch_size = s.job.microbatch_size();
  if (s.microbatch_size < 1 || s.microbatch_size * s.microbatches != s.job.training.global_batch)
    throw std::runtime_error(fmt::format("global batch {} does not split into {} micro-batches", s.job.training.global_batch,
                                         s.microbatches));
  ProgramOptions po;
  po.granularity = Granularity::layer;  // what the backend runs (docs/architecture.md 2.5)
  s.program = build_program(s.job, 0, po);
  check_executable(s.job, s.program);

  if (options.threads > 0) torch::set_num_threads(options.threads);
  s.tokens = options.data_file.empty() ? std::make_unique<TokenSource>(options.seed, s.config.vocab)
                                       : std::make_unique<TokenSource>(options.seed, s.config.vocab, options.data_file);
  s.model = GPTModel(s.config, options.seed);
  const bool adam = s.job.training.optimizer == Optimizer::adam;
  s.lr = options.learning_rate > 0 ? options.learning_rate : adam ? 1e-3 : 0.1;
  if (adam) s.optimizer = std::make_unique<torch::optim::Adam>(s.model->parameters(), torch::optim::AdamOptions(s.lr));
  else s.optimizer = std::make_unique<torch::optim::SGD>(s.model->parameters(), torch::optim::SGDOptions(s.lr));
  s.executor = std::make_unique<ProgramExecutor>(s.job, s.model, *s.optimizer);
  s.t0 = monotonic_seconds();
}

Trainer::~Trainer() = default;

StepReport Trainer::step() {
  Impl& s = *impl_;
  const int seq = s.config.seq_len;
  const int sequences = s.job.training.global_batch;
  std::vector<std::int64_t> flat = s.tokens->batch(s.steps_done, sequences, seq);
  const torch::Tensor batch = torch::from_blob(flat.data(), {sequences, seq + 1}, torch::kLong).clone();
  std::vector<MicroBatchData> data;
  for (int i = 0; i < s.microbatches; ++i) {
    const torch::Tensor rows = batch.slice(0, i * s.microbatch_size, (i + 1) * s.microbatch_size);
    data.push_back({rows.slice(1, 0, seq).contiguous(), rows.slice(1, 1, seq + 1).contiguous()});
  }
  const double start = monotonic_seconds();
  const StepOutcome out = s.executor->run(s.program, data, s.options.record_events ? &s.events : nullptr, s.t0);
  const double seconds = monotonic_seconds() - start;
  ++s.steps_done;
  StepReport r;
  r.step = s.steps_done;
  r.loss = out.loss;
  r.seconds = seconds;
  r.samples_per_s = seconds > 0 ? sequences / seconds : 0;
  return r;
}

const Job& Trainer::job() const { return impl_->job; }
const BackendModelConfig& Trainer::model() const { return impl_->config; }
const RankProgram& Trainer::program() const { return impl_->program; }
std::string Trainer::data_description() const { return impl_->tokens->describe(); }
std::string Trainer::optimizer_description() const {
  return fmt::format("{} (lr {})", impl_->job.training.optimizer == Optimizer::adam ? "Adam" : "SGD", impl_->lr);
}
const std::vector<ExecutedEvent>& Trainer::events() const { return impl_->events; }

}  // namespace partune::backend
