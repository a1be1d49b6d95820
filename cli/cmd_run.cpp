// partune run JOB.yaml --steps N [--trace out.json] [--json] [--scale-* ...] [--data FILE]
// Executes the job's rank program with the LibTorch backend (built only with LibTorch:
// PARTUNE_HAVE_TORCH). Single-rank jobs only for now. This file includes no LibTorch
// header: backend/trainer.hpp hides it.
#include <iostream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "chrome_trace.hpp"
#include "commands.hpp"
#include "partune/backend/trainer.hpp"
#include "partune/costmodel/scenario.hpp"

namespace partune::cli {

namespace {

// The simulator's trace event, so that a measured trace has the simulated layout.
std::vector<TraceEvent> trace_events(const std::vector<backend::ExecutedEvent>& executed) {
  std::vector<TraceEvent> out;
  out.reserve(executed.size());
  for (const auto& e : executed) {
    TraceEvent t;
    t.rank = e.rank;
    t.stream = 0;  // compute: the only kind executed so far
    t.kind = e.kind;
    t.group = e.group;
    t.microbatch = e.microbatch;
    t.chunk = e.chunk;
    t.layer = e.layer;
    t.start = e.start;
    t.end = e.end;
    out.push_back(t);
  }
  return out;
}

std::string program_summary(const RankProgram& p) {
  std::map<std::string, int> counts;
  for (const auto& ins : p.ops) ++counts[to_string(ins.kind)];
  std::string s = fmt::format("{} instructions per step (", p.ops.size());
  bool first = true;
  for (const char* k : {"forward", "recompute", "backward", "optimizer_step"}) {
    if (!counts.count(k)) continue;
    s += fmt::format("{}{} {}", first ? "" : ", ", k, counts[k]);
    first = false;
  }
  return s + ")";
}

}  // namespace

void register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Execute the job's per-rank program with LibTorch (CPU, fp32, single rank)");
  struct Options {
    std::string job, trace, data;
    std::vector<std::string> overrides;
    int steps = 10;
    bool json = false;
    backend::RunOptions run;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("job", opt->job, "job file (YAML)")->required();
  cmd->add_option("--steps", opt->steps, "training steps to run")->check(CLI::PositiveNumber);
  cmd->add_option("--set", opt->overrides, "override a job key, e.g. --set microbatches=4");
  cmd->add_option("--trace", opt->trace, "write a Chrome trace-event file of every executed instruction");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->add_option("--scale-layers", opt->run.scale.layers, "transformer layers to run (default: the job's if the model is small, else 2)");
  cmd->add_option("--scale-hidden", opt->run.scale.hidden, "hidden size (default: the job's if small, else 64)");
  cmd->add_option("--scale-heads", opt->run.scale.heads, "attention heads (default: the job's if small, else 4)");
  cmd->add_option("--scale-seq", opt->run.scale.seq_len, "sequence length (default: the job's if small, else 32)");
  cmd->add_option("--scale-vocab", opt->run.scale.vocab, "vocabulary (default: the job's if small, else 256)");
  cmd->add_option("--seed", opt->run.seed, "seed of the model initialisation and of the synthetic tokens");
  cmd->add_option("--data", opt->run.data_file, "byte-level tokens from this text file (default: synthetic tokens)");
  cmd->add_option("--lr", opt->run.learning_rate, "learning rate (default: 1e-3 Adam, 0.1 SGD)");
  cmd->add_option("--threads", opt->run.threads, "LibTorch intra-op threads (default 1: one core per rank)");
  cmd->callback([opt] {
    const Job job = load_job(opt->job, opt->overrides);
    if (const std::string why = backend::why_not_runnable(job); !why.empty()) {
      std::cerr << "partune: error: " << why << "\n";
      throw Exit{3};
    }
    opt->run.record_events = !opt->trace.empty();
    backend::Trainer trainer(job, opt->run);
    const Job& ran = trainer.job();
    const int m = ran.parallel.microbatches * ran.training.gradient_accumulation;
    if (!opt->json) {
      std::cout << fmt::format("job {}: {} on 1 rank, LibTorch CPU fp32 ({} thread{})\n", job.name, job.model.name,
                               opt->run.threads, opt->run.threads == 1 ? "" : "s");
      std::cout << fmt::format("model run: {}\n", backend::describe(trainer.model()));
      std::cout << fmt::format("batch: {} sequences = {} micro-batch{} x {} sequence{} of {} tokens; {}\n",
                               ran.training.global_batch, m, m == 1 ? "" : "es", ran.microbatch_size(),
                               ran.microbatch_size() == 1 ? "" : "s", trainer.model().seq_len,
                               trainer.optimizer_description());
      std::cout << fmt::format("data: {}\n", trainer.data_description());
      std::cout << fmt::format("program: {}\n\n", program_summary(trainer.program()));
      std::cout << fmt::format("{:>6}  {:>10}  {:>10}  {:>10}\n", "step", "loss", "time (s)", "samples/s");
    }
    std::vector<backend::StepReport> reports;
    for (int i = 0; i < opt->steps; ++i) {
      const backend::StepReport r = trainer.step();
      reports.push_back(r);
      if (!opt->json)
        std::cout << fmt::format("{:>6}  {:>10.6f}  {:>10.4f}  {:>10.1f}\n", r.step, r.loss, r.seconds, r.samples_per_s)
                  << std::flush;
    }
    if (!opt->trace.empty()) write_chrome_trace(opt->trace, trace_events(trainer.events()), 1);
    if (opt->json) {
      const auto& c = trainer.model();
      nlohmann::json steps = nlohmann::json::array();
      for (const auto& r : reports)
        steps.push_back({{"step", r.step}, {"loss", r.loss}, {"seconds", r.seconds}, {"samples_per_s", r.samples_per_s}});
      const nlohmann::json doc = {
          {"job", job.name},
          {"model", {{"name", job.model.name}, {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
                     {"ffn_hidden", c.ffn_hidden}, {"vocab", c.vocab}, {"seq_len", c.seq_len},
                     {"tied_embeddings", c.tied_embeddings}, {"parameters", c.parameters()}}},
          {"global_batch", ran.training.global_batch},
          {"microbatches", m},
          {"microbatch_size", ran.microbatch_size()},
          {"optimizer", trainer.optimizer_description()},
          {"data", trainer.data_description()},
          {"instructions", trainer.program().ops.size()},
          {"steps", steps}};
      std::cout << doc.dump(2) << "\n";
    }
  });
}

}  // namespace partune::cli
