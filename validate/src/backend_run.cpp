#include "partune/validate/backend_run.hpp"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include <fmt/format.h>

#include "partune/launch/backend_process.hpp"
#include "partune/launch/chrome_trace.hpp"

namespace partune::validate {

namespace {

using launch::BackendProcess;
using launch::runner_path;
using launch::shell_quoted;

bool same_model(const nlohmann::json& m, const ModelSpec& c) {
  return m.at("layers").get<int>() == c.layers && m.at("hidden").get<int>() == c.hidden &&
         m.at("heads").get<int>() == c.heads && m.at("ffn_hidden").get<int>() == c.ffn_hidden &&
         m.at("vocab").get<int>() == c.vocab && m.at("seq_len").get<int>() == c.seq_len &&
         m.at("tied_embeddings").get<bool>() == c.tied_embeddings;
}

// A private scratch directory for the backend's trace, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    char path[] = "/tmp/partune-validate-XXXXXX";
    if (!::mkdtemp(path)) throw std::runtime_error("cannot create a temporary directory");
    path_ = path;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

BackendRun run_on_backend(const BackendRunRequest& rq) {
  ScratchDir scratch;
  const std::string trace = scratch.path() + "/measured.json";
  // One intra-op thread per rank: the profile's device is one core (calibrate measures
  // the cost model's rates at one thread), and ranks beyond the cores share them in the
  // simulator as they do here. partune run's own default (cores / local ranks) would give
  // a lone rank every core, which the one-core profile does not describe.
  std::string command = fmt::format("{} run {} --json --trace {} --steps {} --threads 1", shell_quoted(runner_path()),
                                    shell_quoted(rq.file), shell_quoted(trace), rq.steps);
  for (const std::string& o : rq.overrides) command += " --set " + shell_quoted(o);
  if (rq.device != "cpu") command += " --device " + shell_quoted(rq.device);
  BackendRun out;
  out.report = BackendProcess(command).report();
  const nlohmann::json& report = out.report;
  if (report.at("world_size").get<int>() != rq.world_size)
    throw std::runtime_error(
        fmt::format("the backend ran {} ranks; the job has {}", report.at("world_size").get<int>(), rq.world_size));
  if (!same_model(report.at("model"), rq.model))
    throw std::runtime_error(fmt::format("the backend ran the model {}; the scaling rule gives {}",
                                         report.at("model").dump(), describe_model(rq.model)));
  for (const auto& step : report.at("steps")) {
    out.measured.step_seconds.push_back(step.at("seconds").get<double>());
    out.measured.peak_bytes.push_back(step.at("peak_bytes").get<std::vector<double>>());
  }
  out.measured.events = launch::read_chrome_trace(trace);
  return out;
}

}  // namespace partune::validate
