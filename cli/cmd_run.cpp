// partune run JOB.yaml [--nproc N] --steps N [--trace out.json] [--json] [--save DIR]
//                       [--resume DIR] [--scale-* ...] [--data FILE]
// Executes the job's rank programs with the LibTorch backend (built only with LibTorch:
// PARTUNE_HAVE_TORCH), one process per rank. Without a launcher's environment (RANK,
// WORLD_SIZE, ...) this process checks the job, then supervises --nproc local ranks, each
// of which is this same command started again with that environment. This file includes
// no LibTorch header: backend/trainer.hpp hides it.
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "chrome_trace.hpp"
#include "commands.hpp"
#include "partune/backend/trainer.hpp"
#include "partune/costmodel/scenario.hpp"

namespace partune::cli {

namespace {

std::string program_summary(const RankProgram& p) {
  std::map<std::string, int> counts;
  for (const auto& ins : p.ops) ++counts[to_string(ins.kind)];
  std::string s = fmt::format("{} instructions per step (", p.ops.size());
  bool first = true;
  for (const auto& [k, n] : counts) {
    (void)n;
    s += fmt::format("{}{} {}", first ? "" : ", ", k, counts[k]);
    first = false;
  }
  return s + ")";
}

// This process's own arguments, to start the ranks with (each runs the same command).
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

std::string mib(double bytes) { return fmt::format("{:.1f}", bytes / (1024.0 * 1024.0)); }

}  // namespace

void register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Execute the job's per-rank programs with LibTorch (CPU, fp32), one process per rank");
  struct Options {
    std::string job, trace, data, save, resume;
    std::vector<std::string> overrides;
    int steps = 10;
    int nproc = 0;
    bool json = false;
    backend::RunOptions run;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("job", opt->job, "job file (YAML)")->required();
  cmd->add_option("--steps", opt->steps, "training steps to run")->check(CLI::PositiveNumber);
  cmd->add_option("--nproc", opt->nproc,
                  "local ranks to start and supervise (default: the job's world size); not with a launcher's RANK/WORLD_SIZE")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--set", opt->overrides, "override a job key, e.g. --set microbatches=4");
  cmd->add_option("--trace", opt->trace, "write a Chrome trace-event file of every executed instruction of every rank");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->add_option("--save", opt->save, "after the last step, write a sharded checkpoint into this directory (atomic)");
  cmd->add_option("--resume", opt->resume, "continue from the latest checkpoint in this directory");
  cmd->add_option("--scale-layers", opt->run.scale.layers, "transformer layers to run (default: the job's if the model is small, else 2)");
  cmd->add_option("--scale-hidden", opt->run.scale.hidden, "hidden size (default: the job's if small, else 64)");
  cmd->add_option("--scale-heads", opt->run.scale.heads, "attention heads (default: the job's if small, else 4)");
  cmd->add_option("--scale-seq", opt->run.scale.seq_len, "sequence length (default: the job's if small, else 32)");
  cmd->add_option("--scale-vocab", opt->run.scale.vocab, "vocabulary (default: the job's if small, else 256)");
  cmd->add_option("--seed", opt->run.seed, "seed of the model initialisation and of the synthetic tokens");
  cmd->add_option("--data", opt->run.data_file, "byte-level tokens from this text file (default: synthetic tokens)");
  cmd->add_option("--lr", opt->run.learning_rate, "learning rate (default: 1e-3 Adam, 0.1 SGD)");
  cmd->add_option("--threads", opt->run.threads, "LibTorch intra-op threads per rank (default: cores / local ranks)");
  cmd->callback([opt] {
    const Job job = load_job(opt->job, opt->overrides);
    opt->run.environment = backend::rank_environment_from_env();
    if (!opt->run.environment) {
      // This process is the launcher: check everything before any rank starts.
      const int nproc = opt->nproc > 0 ? opt->nproc : job.world_size();
      if (nproc != job.world_size()) {
        std::cerr << fmt::format("partune: error: --nproc {} but job '{}' has world size {} (pipeline {} x tensor {} x data {})\n",
                                 nproc, job.name, job.world_size(), job.parallel.pipeline_parallel_degree,
                                 job.parallel.tensor_parallel_degree, job.data_parallel_degree());
        throw Exit{3};
      }
      backend::RunOptions check = opt->run;
      if (nproc > 1) {
        check.environment = backend::RankEnvironment{};
        check.environment->world_size = nproc;
      }
      if (const std::string why = backend::why_not_runnable(job, check); !why.empty()) {
        std::cerr << "partune: error: " << why << "\n";
        throw Exit{3};
      }
      if (!opt->resume.empty() && !std::ifstream(opt->resume + "/latest")) {
        std::cerr << fmt::format("partune: error: --resume {}: no checkpoint there (no 'latest' file)\n", opt->resume);
        throw Exit{3};
      }
      if (nproc > 1) {
        backend::SuperviseOptions so;
        so.executable = backend::current_executable_path();
        const int status = backend::supervise_local_ranks(own_arguments(), nproc, so);
        if (status != 0) throw Exit{status};
        return;
      }
    } else if (opt->nproc > 0 && opt->nproc != opt->run.environment->world_size &&
               opt->run.environment->store_hosted_by_launcher == false) {
      std::cerr << "partune: error: --nproc is for starting local ranks; this process is already rank "
                << opt->run.environment->rank << " of a launcher's world\n";
      throw Exit{3};
    }
    opt->run.record_events = !opt->trace.empty();
    backend::Trainer trainer(job, opt->run);
    const bool leader = trainer.rank() == 0;
    const Job& ran = trainer.job();
    const int m = ran.parallel.microbatches * ran.training.gradient_accumulation;
    int first_step = 0;
    if (!opt->resume.empty()) first_step = trainer.resume(opt->resume);
    if (leader && !opt->json) {
      std::cout << fmt::format("job {}: {} on {} rank{} (pipeline {} x tensor {} x data {}{}), LibTorch CPU fp32, {} thread{} per rank\n",
                               job.name, job.model.name, ran.world_size(), ran.world_size() == 1 ? "" : "s",
                               ran.parallel.pipeline_parallel_degree, ran.parallel.tensor_parallel_degree,
                               ran.data_parallel_degree(),
                               ran.parallel.sharded_data_parallel_degree > 1
                                   ? fmt::format(", sharded {}", ran.parallel.sharded_data_parallel_degree)
                                   : std::string(),
                               trainer.threads(), trainer.threads() == 1 ? "" : "s");
      std::cout << fmt::format("model run: {}\n", backend::describe(trainer.model()));
      std::cout << fmt::format("batch: {} sequences = {} replica{} x {} micro-batch{} x {} sequence{} of {} tokens; {}\n",
                               ran.training.global_batch, ran.data_parallel_degree(),
                               ran.data_parallel_degree() == 1 ? "" : "s", m, m == 1 ? "" : "es", ran.microbatch_size(),
                               ran.microbatch_size() == 1 ? "" : "s", trainer.model().seq_len,
                               trainer.optimizer_description());
      std::cout << fmt::format("data: {}\n", trainer.data_description());
      std::cout << fmt::format("program (rank 0): {}\n", program_summary(trainer.program()));
      if (first_step > 0) std::cout << fmt::format("resumed from {} after step {}\n", opt->resume, first_step);
      std::cout << fmt::format("\n{:>6}  {:>10}  {:>10}  {:>10}  {:>14}\n", "step", "loss", "time (s)", "samples/s",
                               "peak MiB/rank");
    }
    std::vector<backend::StepReport> reports;
    for (int i = 0; i < opt->steps; ++i) {
      const backend::StepReport r = trainer.step();
      reports.push_back(r);
      if (leader && !opt->json) {
        const double top = r.peak_bytes.empty() ? 0.0 : *std::max_element(r.peak_bytes.begin(), r.peak_bytes.end());
        std::cout << fmt::format("{:>6}  {:>10.6f}  {:>10.4f}  {:>10.1f}  {:>14}\n", r.step, r.loss, r.seconds,
                                 r.samples_per_s, mib(top))
                  << std::flush;
      }
    }
    if (!opt->save.empty()) {
      trainer.save(opt->save);
      if (leader && !opt->json) std::cout << fmt::format("saved step {} to {}\n", reports.back().step, opt->save);
    }
    trainer.finish();
    if (!leader) return;
    if (!opt->trace.empty()) write_chrome_trace(opt->trace, trainer.events(), ran.world_size());
    if (opt->json) {
      const auto& c = trainer.model();
      nlohmann::json steps = nlohmann::json::array();
      for (const auto& r : reports)
        steps.push_back({{"step", r.step}, {"loss", r.loss}, {"seconds", r.seconds}, {"samples_per_s", r.samples_per_s},
                         {"peak_bytes", r.peak_bytes}});
      const nlohmann::json doc = {
          {"job", job.name},
          {"world_size", ran.world_size()},
          {"pipeline_parallel_degree", ran.parallel.pipeline_parallel_degree},
          {"tensor_parallel_degree", ran.parallel.tensor_parallel_degree},
          {"data_parallel_degree", ran.data_parallel_degree()},
          {"threads_per_rank", trainer.threads()},
          {"model", {{"name", job.model.name}, {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
                     {"ffn_hidden", c.ffn_hidden}, {"vocab", c.vocab}, {"seq_len", c.seq_len},
                     {"tied_embeddings", c.tied_embeddings}, {"parameters", c.parameters()}}},
          {"global_batch", ran.training.global_batch},
          {"microbatches", m},
          {"microbatch_size", ran.microbatch_size()},
          {"optimizer", trainer.optimizer_description()},
          {"data", trainer.data_description()},
          {"instructions", trainer.program().ops.size()},
          {"resumed_after", first_step},
          {"steps", steps}};
      std::cout << doc.dump(2) << "\n";
    }
  });
}

}  // namespace partune::cli
