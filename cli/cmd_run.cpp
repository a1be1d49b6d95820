// partune run JOB.yaml [--nproc N] --steps N [--trace out.json] [--json] [--save DIR]
//                       [--resume DIR] [--scale-* ...] [--data FILE]
// Executes the job's rank programs with the LibTorch backend (built only with LibTorch:
// PARTUNE_HAVE_TORCH), one process per rank. Without a launcher's environment (RANK,
// WORLD_SIZE, ...) this process checks the job, then supervises --nproc local ranks, each
// of which is this same command started again with that environment. This file includes
// no LibTorch header: backend/trainer.hpp hides it.
#include <iostream>

#include <fmt/format.h>

#include "partune/launch/chrome_trace.hpp"
#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/backend/trainer.hpp"
#include "partune/costmodel/scenario.hpp"
#include "run_launcher.hpp"
#include "run_report.hpp"

namespace partune::cli {

namespace {

// This rank: the steps, then checkpoint, trace and report (rank 0 prints).
void run_rank(const Job& job, RunCommand& opt) {
  opt.run.record_events = !opt.trace.empty();
  backend::Trainer trainer(job, opt.run);
  const bool leader = trainer.rank() == 0;
  int first_step = 0;
  if (!opt.resume.empty()) first_step = trainer.resume(opt.resume);
  if (leader && !opt.json) {
    std::cout << run_header_text(job, trainer, opt.run.scale);
    if (first_step > 0) std::cout << fmt::format("resumed from {} after step {}\n", opt.resume, first_step);
    std::cout << step_table_header();
  }
  std::vector<backend::StepReport> reports;
  for (int i = 0; i < opt.steps; ++i) {
    reports.push_back(trainer.step());
    if (leader && !opt.json) std::cout << step_line(reports.back()) << std::flush;
  }
  if (!opt.save.empty()) {
    trainer.save(opt.save);
    if (leader && !opt.json) std::cout << fmt::format("saved step {} to {}\n", reports.back().step, opt.save);
  }
  trainer.finish();
  if (!leader) return;
  if (!opt.trace.empty()) {
    launch::write_chrome_trace(opt.trace, trainer.events(), trainer.job().world_size());
    std::cerr << "wrote trace " << opt.trace << "\n";
  }
  if (opt.json) std::cout << run_json(job, trainer, reports, first_step).dump(2) << "\n";
}

}  // namespace

void register_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Execute the job's per-rank programs with LibTorch (CPU fp32, or --device cuda), one process per rank");
  auto opt = std::make_shared<RunCommand>();
  cmd->add_option("job", opt->job, "job file (YAML)")->required();
  cmd->add_option("--steps", opt->steps, "training steps to run")->check(count_in(1, 1000000));
  cmd->add_option("--nproc", opt->nproc,
                  "local ranks to start and supervise (default: the job's world size); not with a launcher's RANK/WORLD_SIZE")
      ->check(count_in(1, 4096));
  cmd->add_option("--set", opt->overrides, "override a job key, e.g. --set microbatches=4");
  cmd->add_option("--trace", opt->trace, "write a Chrome trace-event file of every executed instruction of every rank");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->add_option("--save", opt->save, "after the last step, write a sharded checkpoint into this directory (atomic)");
  cmd->add_option("--resume", opt->resume, "continue from the latest checkpoint in this directory");
  cmd->add_option("--scale-layers", opt->run.scale.layers, "transformer layers to run (default: the job's if the model is small, else 2)")
      ->check(count_in(1, 4096));
  cmd->add_option("--scale-hidden", opt->run.scale.hidden, "hidden size (default: the job's if small, else 64)")->check(count_in(1, 65536));
  cmd->add_option("--scale-heads", opt->run.scale.heads, "attention heads (default: the job's if small, else 4)")->check(count_in(1, 1024));
  cmd->add_option("--scale-seq", opt->run.scale.seq_len, "sequence length (default: the job's if small, else 32)")->check(count_in(1, 65536));
  cmd->add_option("--scale-vocab", opt->run.scale.vocab, "vocabulary (default: the job's if small, else 256)")->check(count_in(1, 1048576));
  cmd->add_flag("--scale-whole", opt->run.scale.whole,
                "run the job's model as written, however large (the --scale-* sizes given still win)");
  cmd->add_option("--device", opt->device,
                  "cpu (fp32, Gloo) or cuda (the job's precision on this machine's GPUs, NCCL or Gloo; the job's model "
                  "as it is unless --scale-* says otherwise)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--seed", opt->run.seed, "seed of the model initialisation and of the synthetic tokens");
  cmd->add_option("--data", opt->run.data_file, "byte-level tokens from this text file (default: synthetic tokens)");
  cmd->add_option("--lr", opt->run.learning_rate, "learning rate (default: 1e-3 Adam, 0.1 SGD)")
      ->check(number_in(0, 10, true));
  cmd->add_option("--threads", opt->run.threads, "LibTorch intra-op threads per rank (default: cores / local ranks)")
      ->check(count_in(1, 1024));
  cmd->callback([opt] {
    if (opt->device == "cuda") {
      opt->run.device = backend::DeviceKind::cuda;
      opt->run.scale.whole = true;  // a GPU runs the job's model as it is
    }
    const Job job = load_job(opt->job, opt->overrides);
    if (!supervised_ranks(job, *opt)) run_rank(job, *opt);
  });
}

}  // namespace partune::cli
