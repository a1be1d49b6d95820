// partune estimate JOB.yaml [--json] [--tokens N] [--require-fit] [--set key=value ...]
// A job that does not fit is estimated and reported all the same (exit 0); with
// --require-fit that verdict is the exit status (3, as when a search finds nothing that fits).
#include <iostream>

#include "commands.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/report/report.hpp"

namespace partune::cli {

void register_estimate(CLI::App& app) {
  auto* cmd = app.add_subcommand("estimate", "Analytical estimate of one training step of a job");
  struct Options {
    std::string job;
    std::vector<std::string> overrides;
    bool json = false;
    bool require_fit = false;
    double tokens = 0;
  };
  auto opt = std::make_shared<Options>();
  cmd->add_option("job", opt->job, "job file (YAML)")->required();
  cmd->add_option("--set", opt->overrides, "override a job key, e.g. --set tensor_parallel_degree=4");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->add_flag("--require-fit", opt->require_fit,
                "exit with status 3 when the job does not fit in the GPUs' memory (the estimate is printed all the same)");
  cmd->add_option("--tokens", opt->tokens, "token budget: also print the time-to-train without and with failures")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([opt] {
    const Job job = load_job(opt->job, opt->overrides);
    const Estimate e = estimate(job);
    if (opt->json) {
      nlohmann::json j = report::estimate_json(job, e);
      j["resilience"] = report::resilience_json(job, e, opt->tokens);
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << report::estimate_text(job, e) << report::resilience_text(job, e, opt->tokens);
    }
    if (opt->require_fit && !e.fits) {
      std::cout.flush();
      throw Exit{3};
    }
  });
}

}  // namespace partune::cli
