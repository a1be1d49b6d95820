#include "run_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "partune/costmodel/parameter_count.hpp"

namespace partune::cli {

namespace {

std::string program_summary(const RankProgram& p) {
  std::map<std::string, int> counts;
  for (const auto& ins : p.ops) ++counts[to_string(ins.kind)];
  std::string s = fmt::format("{} instructions per step (", p.ops.size());
  bool first = true;
  for (const auto& [k, n] : counts) {
    s += fmt::format("{}{} {}", first ? "" : ", ", k, n);
    first = false;
  }
  return s + ")";
}

std::string mib(double bytes) { return fmt::format("{:.1f}", bytes / (1024.0 * 1024.0)); }

const char* plural(int n, const char* many = "s") { return n == 1 ? "" : many; }

}  // namespace

std::string run_header_text(const Job& job, const backend::Trainer& trainer, const ScaleOptions& scale) {
  const Job& ran = trainer.job();
  const int m = ran.parallel.microbatches * ran.training.gradient_accumulation;
  std::string s = describe_scaling(job.model, ran.model, scale) + "\n";
  s += fmt::format(
      "job {}: {} on {} rank{} (pipeline {} x tensor {}{} x data {}{}), {}, {} thread{} per rank\n",
      job.name, job.model.name, ran.world_size(), plural(ran.world_size()), ran.parallel.pipeline_parallel_degree,
      ran.parallel.tensor_parallel_degree,
      ran.parallel.context_parallel_degree > 1
          ? fmt::format(" x context {} ({})", ran.parallel.context_parallel_degree, to_string(ran.parallel.cp_comm_type))
          : std::string(),
      ran.data_parallel_degree(),
      ran.parallel.sharded_data_parallel_degree > 1
          ? fmt::format(", sharded {}", ran.parallel.sharded_data_parallel_degree)
          : std::string(),
      trainer.device_description(), trainer.threads(), plural(trainer.threads()));
  s += fmt::format("model run: {}\n", describe_model(ran.model, ran.parallel.flash_attention));
  s += fmt::format("batch: {} sequences = {} replica{} x {} micro-batch{} x {} sequence{} of {} tokens; {}\n",
                   ran.training.global_batch, ran.data_parallel_degree(), plural(ran.data_parallel_degree()), m,
                   plural(m, "es"), ran.microbatch_size(), plural(ran.microbatch_size()), ran.model.seq_len,
                   trainer.optimizer_description());
  s += fmt::format("data: {}\n", trainer.data_description());
  s += fmt::format("program (rank 0): {}\n", program_summary(trainer.program()));
  return s;
}

std::string step_table_header() {
  return fmt::format("\n{:>6}  {:>10}  {:>10}  {:>10}  {:>14}\n", "step", "loss", "time (s)", "samples/s",
                     "peak MiB/rank");
}

std::string step_line(const backend::StepReport& r) {
  const double top = r.peak_bytes.empty() ? 0.0 : *std::max_element(r.peak_bytes.begin(), r.peak_bytes.end());
  return fmt::format("{:>6}  {:>10.6f}  {:>10.4f}  {:>10.1f}  {:>14}\n", r.step, r.loss, r.seconds, r.samples_per_s,
                     mib(top));
}

nlohmann::json run_json(const Job& job, const backend::Trainer& trainer,
                        const std::vector<backend::StepReport>& reports, int first_step) {
  const Job& ran = trainer.job();
  const ModelSpec& c = ran.model;
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& r : reports)
    steps.push_back({{"step", r.step}, {"loss", r.loss}, {"seconds", r.seconds}, {"samples_per_s", r.samples_per_s},
                     {"peak_bytes", r.peak_bytes}});
  return {{"job", job.name},
          {"world_size", ran.world_size()},
          {"pipeline_parallel_degree", ran.parallel.pipeline_parallel_degree},
          {"tensor_parallel_degree", ran.parallel.tensor_parallel_degree},
          {"data_parallel_degree", ran.data_parallel_degree()},
          {"context_parallel_degree", ran.parallel.context_parallel_degree},
          {"threads_per_rank", trainer.threads()},
          {"device", trainer.device_description()},
          {"model", {{"name", job.model.name}, {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
                     {"ffn_hidden", c.ffn_hidden}, {"vocab", c.vocab}, {"seq_len", c.seq_len},
                     {"tied_embeddings", c.tied_embeddings}, {"parameters", std::llround(total_parameters(c))}}},
          {"global_batch", ran.training.global_batch},
          {"microbatches", ran.parallel.microbatches * ran.training.gradient_accumulation},
          {"microbatch_size", ran.microbatch_size()},
          {"optimizer", trainer.optimizer_description()},
          {"data", trainer.data_description()},
          {"instructions", trainer.program().ops.size()},
          {"resumed_after", first_step},
          {"steps", steps}};
}


}  // namespace partune::cli
