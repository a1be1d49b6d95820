// partune validate JOB.yaml | --suite DIR [--jobs a,b] [--steps N] [--warmup K] [--set k=v]
//                 [--json] [--trace-dir DIR]
// The predicted-vs-measured loop: each job is simulated (per-layer programs, every rank,
// on the job's instance type, with the model the backend runs) and run on the LibTorch
// backend (build/partune-run, whose --json report and --trace this command reads, so
// this binary stays free of LibTorch). It prints the step time, the time of each
// instruction kind and each rank's peak memory, predicted against measured, with errors.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend_process.hpp"
#include "chrome_trace.hpp"
#include "commands.hpp"
#include "partune/backend/scaling.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"
#include "validation.hpp"

namespace partune::cli {

namespace fs = std::filesystem;

namespace {

struct ValidateOptions {
  std::string job, suite, trace_dir, jobs;
  std::vector<std::string> overrides;
  int steps = 8, warmup = 3;
  bool json = false;
};

// One job of the run: its file, the job as loaded and the job as the backend runs it.
struct JobCase {
  std::string file;
  Job job;
  backend::BackendModelConfig model;
  Job ran;
};

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

std::string signed_pct(double pct) { return std::isfinite(pct) ? fmt::format("{:+.1f}%", pct) : std::string("n/a"); }

// "tp2 x pp2 (1F1B) x dp1, cluster, full ckpt": the knobs that decide the programs.
std::string layout(const Job& job) {
  const ParallelConfig& pc = job.parallel;
  std::string s = fmt::format("tp{} pp{}", pc.tensor_parallel_degree, pc.pipeline_parallel_degree);
  if (pc.pipeline_parallel_degree > 1)
    s += pc.pipeline == PipelineSchedule::simple ? " gpipe"
         : pc.virtual_stages > 1                ? fmt::format(" interleaved-v{}", pc.virtual_stages)
                                                : " 1f1b";
  s += fmt::format(" dp{}", job.data_parallel_degree());
  if (pc.sharded_data_parallel_degree > 1) s += fmt::format(" sdp{}", pc.sharded_data_parallel_degree);
  if (pc.shard_optimizer_state && pc.sharded_data_parallel_degree == 1) s += " zero1";
  if (pc.activation_checkpointing == Checkpointing::full) s += " ckpt-full";
  if (pc.activation_checkpointing == Checkpointing::selective) s += " ckpt-sel";
  if (pc.offload_activations) s += " offload";
  if (job.training.gradient_accumulation > 1) s += fmt::format(" ga{}", job.training.gradient_accumulation);
  if (job.lm_head_on_first_stage()) s += " head-first";
  if (pc.placement_strategy != "cluster") s += " " + pc.placement_strategy;
  return s;
}

bool same_model(const nlohmann::json& m, const backend::BackendModelConfig& c) {
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
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Simulates and runs one job; the result object of --json (text is made from it).
nlohmann::json validate_job(const JobCase& c, const ValidateOptions& opt) {
  const Job& ran = c.ran;
  const int world = ran.world_size();
  const std::vector<RankProgram> programs = build_programs(ran, ProgramOptions{Granularity::layer});

  // (a) The prediction: every rank (no symmetry: the per-rank peaks are compared), the
  // backend's per-layer instructions.
  sim::SimOptions so;
  so.use_symmetry = false;
  so.record_events = true;
  so.granularity = Granularity::layer;
  const sim::SimResult predicted = sim::simulate(ran, so);
  const KindTimes predicted_kinds = predicted_kind_times(programs, predicted);

  // (b) The measurement.
  ScratchDir scratch;
  const std::string trace = scratch.path() + "/measured.json";
  // One intra-op thread per rank: the profile's device is one core (calibrate measures
  // the cost model's rates at one thread), and ranks beyond the cores share them in the
  // simulator as they do here. partune run's own default (cores / local ranks) would give
  // a lone rank every core, which the one-core profile does not describe.
  std::string command = fmt::format("{} run {} --json --trace {} --steps {} --threads 1", shell_quoted(runner_path()),
                                    shell_quoted(c.file), shell_quoted(trace), opt.steps);
  for (const std::string& o : opt.overrides) command += " --set " + shell_quoted(o);
  const nlohmann::json report = BackendProcess(command).report();
  if (report.at("world_size").get<int>() != world)
    throw std::runtime_error(fmt::format("the backend ran {} ranks; the job has {}", report.at("world_size").get<int>(), world));
  if (!same_model(report.at("model"), c.model))
    throw std::runtime_error(fmt::format("the backend ran the model {}; the scaling rule gives {}",
                                         report.at("model").dump(), backend::describe(c.model)));
  const auto& steps = report.at("steps");
  const int run_steps = static_cast<int>(steps.size());
  if (run_steps <= opt.warmup)
    throw std::runtime_error(fmt::format("the backend ran {} steps, none after the {} warm-up steps", run_steps, opt.warmup));
  std::vector<double> seconds;
  std::vector<double> peak(static_cast<std::size_t>(world), 0.0);
  for (int s = opt.warmup; s < run_steps; ++s) {
    seconds.push_back(steps[static_cast<std::size_t>(s)].at("seconds").get<double>());
    const auto& pb = steps[static_cast<std::size_t>(s)].at("peak_bytes");
    if (static_cast<int>(pb.size()) != world)
      throw std::runtime_error(fmt::format("step {} reports {} peaks for {} ranks", s + 1, pb.size(), world));
    for (int r = 0; r < world; ++r) peak[static_cast<std::size_t>(r)] = std::max(peak[static_cast<std::size_t>(r)], pb[static_cast<std::size_t>(r)].get<double>());
  }
  const double measured_step = median(seconds);

  const std::vector<MeasuredEvent> measured_events = read_measured_trace(trace);
  const MeasuredSteps measured = split_measured_steps(programs, measured_events, run_steps);
  std::set<OpKind> kinds;
  for (const auto& [k, v] : predicted_kinds) kinds.insert(k);
  for (int s = opt.warmup; s < run_steps; ++s)
    for (const auto& [k, v] : measured.kind_times[static_cast<std::size_t>(s)]) kinds.insert(k);
  nlohmann::json kind_rows = nlohmann::json::array();
  std::set<std::string> measured_names;
  for (OpKind k : kinds) {
    std::vector<double> per_step;
    for (int s = opt.warmup; s < run_steps; ++s) {
      const auto& kt = measured.kind_times[static_cast<std::size_t>(s)];
      const auto it = kt.find(k);
      per_step.push_back(it == kt.end() ? 0.0 : it->second);
      if (it != kt.end()) measured_names.insert(to_string(k));
    }
    const auto p = predicted_kinds.find(k);
    const double pv = p == predicted_kinds.end() ? 0.0 : p->second, mv = median(per_step);
    kind_rows.push_back({{"kind", to_string(k)}, {"predicted_s", pv}, {"measured_s", mv}, {"error_pct", error_pct(pv, mv)}});
  }
  const std::vector<std::string> predicted_names = event_kind_names(predicted.events);
  nlohmann::json missing = nlohmann::json::array();
  for (const auto& n : predicted_names)
    if (!measured_names.count(n)) missing.push_back(n);

  // The simulator's peak includes the instance's reserved memory (runtime, allocator
  // slack); the backend counts tensor bytes only, so that constant is left out of the
  // comparison (it is the same for every rank and job of an instance).
  const double reserved = ran.cluster.instance.gpu.reserved_bytes;
  nlohmann::json memory = nlohmann::json::array();
  for (const auto& rr : predicted.ranks) {
    const double pv = rr.peak_memory - reserved, mv = peak[static_cast<std::size_t>(rr.rank)];
    memory.push_back({{"rank", rr.rank}, {"stage", rr.stage}, {"predicted_bytes", pv}, {"measured_bytes", mv},
                      {"error_pct", error_pct(pv, mv)}});
  }

  nlohmann::json out = {
      {"job", c.job.name},
      {"file", c.file},
      {"instance_type", ran.cluster.instance.name},
      {"world_size", world},
      {"layout", layout(ran)},
      {"model", backend::describe(c.model)},
      {"threads_per_rank", report.value("threads_per_rank", 0)},
      {"steps", {{"run", run_steps}, {"warmup", opt.warmup}, {"timed_seconds", seconds}}},
      {"step_time", {{"predicted_s", predicted.metrics.step_time}, {"measured_s", measured_step},
                     {"error_pct", error_pct(predicted.metrics.step_time, measured_step)}}},
      {"kinds", kind_rows},
      {"memory", memory},
      {"reserved_bytes_left_out", reserved},
      {"predicted_event_kinds", predicted_names},
      {"measured_event_kinds", std::vector<std::string>(measured_names.begin(), measured_names.end())},
      {"missing_measured_kinds", missing}};

  if (!opt.trace_dir.empty()) {
    fs::create_directories(opt.trace_dir);
    const std::string pfile = opt.trace_dir + "/" + c.job.name + "-predicted.json";
    const std::string mfile = opt.trace_dir + "/" + c.job.name + "-measured.json";
    write_chrome_trace(pfile, predicted.events, ran.cluster.instance.gpus_per_node);
    // The timed step whose time is the median stands for the run.
    int pick = opt.warmup;
    for (int s = opt.warmup; s < run_steps; ++s)
      if (std::abs(seconds[static_cast<std::size_t>(s - opt.warmup)] - measured_step) <
          std::abs(seconds[static_cast<std::size_t>(pick - opt.warmup)] - measured_step))
        pick = s;
    write_chrome_trace(mfile, measured.events[static_cast<std::size_t>(pick)], ran.cluster.instance.gpus_per_node);
    out["traces"] = {{"predicted", pfile}, {"measured", mfile}, {"measured_step", pick + 1}};
  }
  return out;
}

std::string job_text(const nlohmann::json& r) {
  std::ostringstream o;
  o << fmt::format("{} ({})\n", r.at("job").get<std::string>(), r.at("file").get<std::string>());
  if (r.contains("error")) {
    o << "  FAILED: " << r.at("error").get<std::string>() << "\n";
    return o.str();
  }
  const auto& st = r.at("steps");
  o << fmt::format("  {} rank{} on {}: {}; {} thread{} per rank\n", r.at("world_size").get<int>(),
                   r.at("world_size").get<int>() == 1 ? "" : "s", r.at("instance_type").get<std::string>(),
                   r.at("layout").get<std::string>(), r.at("threads_per_rank").get<int>(),
                   r.at("threads_per_rank").get<int>() == 1 ? "" : "s");
  o << fmt::format("  model run: {}\n", r.at("model").get<std::string>());
  o << fmt::format("  measured: median of steps {}..{} (after {} warm-up)\n", st.at("warmup").get<int>() + 1,
                   st.at("run").get<int>(), st.at("warmup").get<int>());
  o << fmt::format("  {:<34} {:>12} {:>12} {:>8}\n", "", "predicted", "measured", "error");
  const auto& t = r.at("step_time");
  o << fmt::format("  {:<34} {:>10.4f} s {:>10.4f} s {:>8}\n", "step time", t.at("predicted_s").get<double>(),
                   t.at("measured_s").get<double>(), signed_pct(t.at("error_pct").is_null() ? NAN : t.at("error_pct").get<double>()));
  for (const auto& k : r.at("kinds"))
    o << fmt::format("  {:<34} {:>10.4f} s {:>10.4f} s {:>8}\n",
                     k.at("kind").get<std::string>() + " (per rank, mean)", k.at("predicted_s").get<double>(),
                     k.at("measured_s").get<double>(),
                     signed_pct(k.at("error_pct").is_null() ? NAN : k.at("error_pct").get<double>()));
  for (const auto& m : r.at("memory"))
    o << fmt::format("  {:<34} {:>8.1f} MiB {:>8.1f} MiB {:>8}\n",
                     fmt::format("peak memory rank {} (stage {})", m.at("rank").get<int>(), m.at("stage").get<int>()),
                     mib(m.at("predicted_bytes").get<double>()), mib(m.at("measured_bytes").get<double>()),
                     signed_pct(m.at("error_pct").is_null() ? NAN : m.at("error_pct").get<double>()));
  if (!r.at("missing_measured_kinds").empty())
    o << "  predicted kinds never measured: " << r.at("missing_measured_kinds").dump() << "\n";
  if (r.contains("traces"))
    o << fmt::format("  traces: {} and {} (measured step {})\n", r["traces"]["predicted"].get<std::string>(),
                     r["traces"]["measured"].get<std::string>(), r["traces"]["measured_step"].get<int>());
  return o.str();
}

double json_pct(const nlohmann::json& v) { return v.is_null() ? NAN : v.get<double>(); }

nlohmann::json summary(const nlohmann::json& results) {
  std::vector<double> step_errors, memory_errors;
  double worst = -1;
  std::string worst_job;
  int failed = 0;
  for (const auto& r : results) {
    if (r.contains("error")) {
      ++failed;
      continue;
    }
    const double e = std::abs(json_pct(r["step_time"]["error_pct"]));
    if (std::isfinite(e)) {
      step_errors.push_back(e);
      if (e > worst) worst = e, worst_job = r["job"].get<std::string>();
    }
    for (const auto& m : r["memory"]) {
      const double me = std::abs(json_pct(m["error_pct"]));
      if (std::isfinite(me)) memory_errors.push_back(me);
    }
  }
  return {{"jobs", results.size()},
          {"failed", failed},
          {"median_abs_step_error_pct", median(step_errors)},
          {"worst_abs_step_error_pct", worst >= 0 ? nlohmann::json(worst) : nlohmann::json()},
          {"worst_job", worst_job},
          {"median_abs_memory_error_pct", median(memory_errors)},
          {"memory_errors_over", "every rank of every job"}};
}

std::string summary_text(const nlohmann::json& results, const nlohmann::json& s) {
  std::ostringstream o;
  o << fmt::format("{:<30} {:>5}  {:<38} {:>10} {:>10} {:>8} {:>12}\n", "job", "world", "layout", "predicted",
                   "measured", "error", "memory error");
  for (const auto& r : results) {
    if (r.contains("error")) {
      o << fmt::format("{:<30} FAILED\n", r["job"].get<std::string>());
      continue;
    }
    // The memory column: the rank with the largest |error|.
    double worst_mem = NAN;
    for (const auto& m : r["memory"]) {
      const double e = json_pct(m["error_pct"]);
      if (std::isfinite(e) && (!std::isfinite(worst_mem) || std::abs(e) > std::abs(worst_mem))) worst_mem = e;
    }
    o << fmt::format("{:<30} {:>5}  {:<38} {:>8.4f} s {:>8.4f} s {:>8} {:>12}\n", r["job"].get<std::string>(),
                     r["world_size"].get<int>(), r["layout"].get<std::string>(),
                     r["step_time"]["predicted_s"].get<double>(), r["step_time"]["measured_s"].get<double>(),
                     signed_pct(json_pct(r["step_time"]["error_pct"])), signed_pct(worst_mem));
  }
  const auto pct = [](const nlohmann::json& v) {
    return std::isfinite(json_pct(v)) ? fmt::format("{:.1f}%", v.get<double>()) : std::string("n/a");
  };
  o << fmt::format("\n{} job{}, {} failed; step time |error|: median {}, worst {}{}; peak memory |error| (every rank): "
                   "median {}\n",
                   s["jobs"].get<int>(), s["jobs"].get<int>() == 1 ? "" : "s", s["failed"].get<int>(),
                   pct(s["median_abs_step_error_pct"]), pct(s["worst_abs_step_error_pct"]),
                   s["worst_job"].get<std::string>().empty() ? "" : " (" + s["worst_job"].get<std::string>() + ")",
                   pct(s["median_abs_memory_error_pct"]));
  o << "memory error column: the rank with the largest |error|; targets: median |step error| <= 10%, worst <= 25%, "
       "memory median <= 10%\n";
  return o.str();
}

std::vector<std::string> suite_files(const ValidateOptions& opt) {
  if (!fs::is_directory(opt.suite))
    throw std::runtime_error(fmt::format("--suite {}: not a directory", opt.suite));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(opt.suite)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".yaml" || ext == ".yml")) files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  if (!opt.jobs.empty()) {
    std::vector<std::string> wanted, kept;
    std::stringstream ss(opt.jobs);
    for (std::string w; std::getline(ss, w, ',');)
      if (!w.empty()) wanted.push_back(w);
    for (const std::string& w : wanted) {
      const auto it = std::find_if(files.begin(), files.end(),
                                   [&](const std::string& f) { return fs::path(f).stem().string() == w; });
      if (it == files.end()) throw std::runtime_error(fmt::format("--jobs: no job file {}.yaml in {}", w, opt.suite));
      kept.push_back(*it);
    }
    files = kept;
  }
  if (files.empty()) throw std::runtime_error(fmt::format("--suite {}: no *.yaml job files there", opt.suite));
  return files;
}

}  // namespace

void register_validate(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "validate", "Predicted vs measured: simulate each job and run it on the LibTorch backend, then compare");
  auto opt = std::make_shared<ValidateOptions>();
  cmd->add_option("job", opt->job, "job file (YAML)");
  cmd->add_option("--suite", opt->suite, "every *.yaml job in this directory, sorted by name");
  cmd->add_option("--jobs", opt->jobs, "with --suite: only these job files (names without .yaml, comma-separated)");
  cmd->add_option("--steps", opt->steps, "backend steps per job, warm-up included")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", opt->warmup, "first steps left out of the measurement")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--set", opt->overrides, "override a key of every job, e.g. --set optimizer=sgd");
  cmd->add_option("--trace-dir", opt->trace_dir, "write DIR/<job>-predicted.json and DIR/<job>-measured.json (Chrome traces)");
  cmd->add_flag("--json", opt->json, "print one JSON object");
  cmd->callback([opt] {
    if (opt->job.empty() == opt->suite.empty()) {
      std::cerr << "partune: error: validate takes one job file or --suite DIR (not both, not neither)\n";
      throw Exit{2};
    }
    if (!opt->jobs.empty() && opt->suite.empty()) {
      std::cerr << "partune: error: --jobs selects jobs of a --suite\n";
      throw Exit{2};
    }
    if (opt->warmup >= opt->steps) {
      std::cerr << fmt::format("partune: error: --steps {} leaves no step after --warmup {}\n", opt->steps, opt->warmup);
      throw Exit{2};
    }
    if (::access(runner_path().c_str(), X_OK) != 0) {
      std::cerr << "partune: error: validate needs the LibTorch backend (build/partune-run), and this build has none\n";
      throw Exit{2};
    }
    // Every file is loaded and checked before anything runs: a typo in the 20th job
    // stops the suite at once, naming file, key and reason (ScenarioError, exit 2).
    std::vector<JobCase> cases;
    for (const std::string& f : opt->suite.empty() ? std::vector<std::string>{opt->job} : suite_files(*opt)) {
      JobCase c;
      c.file = f;
      c.job = load_job(f, opt->overrides);
      try {
        c.model = backend::scaled_model(c.job.model, backend::ScaleOptions{});
      } catch (const std::invalid_argument& e) {
        throw ScenarioError(f, "model", e.what());
      }
      c.ran = backend::scaled_job(c.job, c.model);
      cases.push_back(std::move(c));
    }
    nlohmann::json results = nlohmann::json::array();
    for (const JobCase& c : cases) {
      nlohmann::json r;
      try {
        r = validate_job(c, *opt);
      } catch (const std::exception& e) {
        r = {{"job", c.job.name}, {"file", c.file}, {"error", e.what()}};
        std::cerr << fmt::format("partune: error: {}: {}\n", c.file, e.what());
      }
      results.push_back(r);
      if (!opt->json) std::cout << job_text(r) << "\n" << std::flush;
    }
    const nlohmann::json s = summary(results);
    if (opt->json) std::cout << nlohmann::json({{"jobs", results}, {"summary", s}}).dump(2) << "\n";
    else std::cout << summary_text(results, s);
    if (s["failed"].get<int>() > 0) throw Exit{1};
  });
}

}  // namespace partune::cli
