// The `partune` Python module (pybind11): load_job, estimate, simulate, search, sweep over
// the same libraries as the command line, each taking a job file path or a dict (the job
// file's mapping) and --set-style overrides, and returning plain dicts with the keys of
// the matching `--json` output. Bad input raises ValueError carrying the file, the key
// and the reason ("FILE: KEY: reason", as the command line prints it).
//
//   PYTHONPATH=build/python python3 -c "import partune; print(partune.estimate('job.yaml')['samples_per_s'])"
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <fmt/format.h>

#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"
#include "partune/costmodel/table.hpp"
#include "partune/search/request.hpp"
#include "partune/search/sweep.hpp"
#include "partune/search/tuner.hpp"
#include "partune/sim/simulator.hpp"
#include "partune/launch/chrome_trace.hpp"
#include "partune/launch/process_spawn.hpp"
#include "partune/report/report.hpp"
#include "partune/report/search_report.hpp"
#include "partune/report/sweep_job.hpp"
#include "partune/report/sweep_report.hpp"

namespace py = pybind11;
using namespace partune;

namespace {

// The partune binary built beside the module (PARTUNE_CLI overrides).
launch::CliResult run_cli(const std::vector<std::string>& args) {
  const char* given = std::getenv("PARTUNE_CLI");
  const std::string path = given && *given ? given : PARTUNE_CLI_PATH;
  if (::access(path.c_str(), X_OK) != 0)
    throw std::runtime_error("partune module: no partune binary at " + path + " (build it, or set PARTUNE_CLI)");
  return launch::run_program(path, args);
}

// A job argument: a path (str), or a dict written out as JSON (which the YAML loader
// reads as it is); `origin` names it in errors.
struct JobSource {
  std::string path, text, origin;
};
JobSource job_source(const py::object& job) {
  if (py::isinstance<py::str>(job)) {
    const std::string path = job.cast<std::string>();
    return {path, "", path};
  }
  if (py::isinstance<py::dict>(job)) {
    const std::string text = py::module_::import("json").attr("dumps")(job).cast<std::string>();
    return {"", text, "<dict>"};
  }
  throw py::type_error("job: expected a path (str) or a job mapping (dict)");
}

Job load(const py::object& job, const std::vector<std::string>& overrides) {
  const JobSource s = job_source(job);
  return s.text.empty() ? load_job(s.path, overrides) : parse_job(s.text, s.origin, overrides);
}

// nlohmann::json -> Python objects, through the json module (exact for every key).
py::object to_python(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

// The job as its file would say it (scenario_writer), as a dict.
py::object job_dict(const Job& job) {
  const YAML::Node node = YAML::Load(job_yaml(job, ""));
  // Each scalar typed as YAML reads it: integer, number, boolean, else text.
  std::function<nlohmann::json(const YAML::Node&)> convert = [&](const YAML::Node& n) -> nlohmann::json {
    if (n.IsMap()) {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& kv : n) out[kv.first.as<std::string>()] = convert(kv.second);
      return out;
    }
    if (n.IsSequence()) {
      nlohmann::json out = nlohmann::json::array();
      for (const auto& v : n) out.push_back(convert(v));
      return out;
    }
    if (!n.IsScalar()) return nullptr;
    const std::string s = n.Scalar();
    long long i;
    double d;
    bool b;
    if (YAML::convert<long long>::decode(n, i)) return i;
    if (YAML::convert<double>::decode(n, d)) return d;
    if (YAML::convert<bool>::decode(n, b)) return b;
    return s;
  };
  return to_python(convert(node));
}

py::object estimate_py(const py::object& job, const std::vector<std::string>& overrides) {
  const Job j = load(job, overrides);
  const Estimate e = estimate(j);
  nlohmann::json out = report::estimate_json(j, e);
  out["resilience"] = report::resilience_json(j, e);  // as estimate --json
  return to_python(out);
}

// A command of the partune binary on `job` (a dict is written to a temporary file, whose
// name errors then call "<dict>"); its --json output. Exit status 2 (bad input) raises
// ValueError with the binary's message; any other failure RuntimeError.
nlohmann::json run_on_job(const py::object& job, const std::string& command, std::vector<std::string> extra,
                          const std::vector<std::string>& overrides) {
  load(job, overrides);  // bad input raises here, with the module's own names
  const JobSource s = job_source(job);
  std::optional<launch::TemporaryFile> file;
  if (!s.text.empty()) file.emplace(".yaml", s.text);
  std::vector<std::string> args{command, file ? file->path() : s.path, "--json"};
  for (const std::string& o : overrides) args.insert(args.end(), {"--set", o});
  args.insert(args.end(), extra.begin(), extra.end());
  launch::CliResult r;
  {
    py::gil_scoped_release released;  // other Python threads run meanwhile
    r = run_cli(args);
  }
  if (r.status != 0) {
    std::string message = r.err.substr(0, r.err.find('\n'));
    if (message.rfind("partune: error: ", 0) == 0) message = message.substr(16);
    if (file)
      for (auto at = message.find(file->path()); at != std::string::npos; at = message.find(file->path()))
        message.replace(at, file->path().size(), "<dict>");
    if (r.status == 2) throw py::value_error(message);
    throw std::runtime_error("partune " + command + " exited with status " + std::to_string(r.status) + ": " + message);
  }
  return nlohmann::json::parse(r.out);
}

// Runs in the partune binary's process (cli_process.hpp: the simulator forks). With
// `timeline`, also "events": every simulated instruction's interval, read back from the
// Chrome trace `simulate --trace` writes: rank, stream (0 compute, 1 pipeline and copies,
// 2 + one per communicator), kind, group, micro-batch, chunk, layer, start and end in s.
py::object simulate_py(const py::object& job, const std::vector<std::string>& overrides, bool timeline) {
  std::optional<launch::TemporaryFile> trace;
  std::vector<std::string> extra;
  if (timeline) {
    trace.emplace(".json", "");
    extra = {"--trace", trace->path()};
  }
  nlohmann::json out = run_on_job(job, "simulate", extra, overrides);
  if (timeline) {
    out["events"] = nlohmann::json::array();
    for (const TraceEvent& e : launch::read_chrome_trace(trace->path()))
      out["events"].push_back({{"rank", e.rank}, {"stream", e.stream}, {"kind", to_string(e.kind)},
                               {"group", to_string(e.group)}, {"microbatch", e.microbatch}, {"chunk", e.chunk},
                               {"layer", e.layer}, {"start", e.start}, {"end", e.end}});
  }
  return to_python(out);
}

// With the simulator, in the partune binary's process (as simulate).
py::object search_py(const py::object& job, const std::vector<std::string>& overrides, bool estimator_only,
                     int top_k, double tokens, double price_per_node_hour, double memory_headroom) {
  if (!(memory_headroom >= 0 && memory_headroom <= 0.9))
    throw py::value_error(fmt::format("memory_headroom: {} is not in [0, 0.9]", memory_headroom));
  if (!estimator_only) {
    std::vector<std::string> extra{"--top-k", std::to_string(top_k), "--memory-headroom",
                                   fmt::format("{}", memory_headroom)};
    if (tokens > 0) extra.insert(extra.end(), {"--tokens", fmt::format("{}", tokens)});
    if (price_per_node_hour > 0) extra.insert(extra.end(), {"--price-per-node-hour", fmt::format("{}", price_per_node_hour)});
    return to_python(run_on_job(job, "search", extra, overrides));
  }
  const Job base = load(job, overrides);
  search::SearchRequest request;
  request.estimator_only = true;
  request.options.top_k = top_k;
  request.options.memory_headroom = memory_headroom;
  const search::SearchReport r = search::run_search(base, job_source(job).origin, request);
  if (r.ranked.empty()) throw py::value_error(base.name + ": no configuration fits");
  return to_python(report::search_json(base, r, report::search_budget(tokens, price_per_node_hour)));
}

py::object sweep_py(const py::object& job, const py::object& vary, const std::vector<std::string>& overrides,
                    bool searched, double tokens, int threads) {
  const JobSource s = job_source(job);
  const search::SweepJob sweep_job = s.text.empty() ? report::sweep_job_file(s.path, overrides)
                                                    : report::sweep_job_text(s.text, s.origin, overrides);
  // vary: {"nodes": [8, 16], ...} or ["nodes=8,16", ...].
  std::vector<std::string> axes;
  if (py::isinstance<py::dict>(vary)) {
    for (const auto& kv : vary.cast<py::dict>()) {
      std::string values;
      for (const auto& v : kv.second.cast<py::list>()) {
        // True/False as YAML writes them; numbers and text as str() does.
        const std::string text = py::isinstance<py::bool_>(v) ? (v.cast<bool>() ? "true" : "false")
                                                              : py::str(v).cast<std::string>();
        values += (values.empty() ? "" : ",") + text;
      }
      axes.push_back(py::str(kv.first).cast<std::string>() + "=" + values);
    }
  } else {
    axes = vary.cast<std::vector<std::string>>();
  }
  search::SweepOptions o;
  o.axes = search::job_sweep_axes(sweep_job, axes, "vary");
  o.overrides = overrides;
  o.search = searched;
  o.threads = threads;
  const std::vector<search::SweepPoint> points = search::run_sweep(sweep_job, o);
  TrainingCostOptions budget;
  budget.tokens = tokens;
  return to_python(report::sweep_json(o.axes, search::microbatch_policy(sweep_job, o), points, budget));
}

// The published tables (files or folders; none: the shipped ones) against the estimator
// or the simulator: the keys of `partune reproduce --json`.
py::object reproduce_py(const std::vector<std::string>& paths, bool simulator) {
  if (simulator) {  // in the partune binary's process (as simulate)
    std::vector<std::string> args{"reproduce"};
    args.insert(args.end(), paths.begin(), paths.end());
    args.push_back("--json");
    launch::CliResult r;
    {
      py::gil_scoped_release released;
      r = run_cli(args);
    }
    if (r.status != 0) throw py::value_error(r.err.substr(0, r.err.find('\n')));
    return to_python(nlohmann::json::parse(r.out));
  }
  const std::vector<Table> tables = load_tables(paths.empty() ? std::vector<std::string>{scenario_root() + "/tables"} : paths);
  const ReproduceResult r = reproduce(tables, [](const Job& j) {
    return estimate(j);
  });
  return to_python(report::reproduce_json(r));
}

}  // namespace

PYBIND11_MODULE(partune, m) {
  m.doc() = "partune: how should this model be split across these machines, and how fast will it train?";
  py::register_exception<ScenarioError>(m, "ScenarioError", PyExc_ValueError);
  using Overrides = std::vector<std::string>;
  m.def("load_job", [](const py::object& job, const Overrides& overrides) { return job_dict(load(job, overrides)); },
        py::arg("job"), py::arg("overrides") = Overrides{},
        "The job (a path or a dict, with --set-style overrides) as its file would say it, checked.");
  m.def("estimate", &estimate_py, py::arg("job"), py::arg("overrides") = Overrides{},
        "One step by the analytical estimator: the keys of `partune estimate --json`.");
  m.def("simulate", &simulate_py, py::arg("job"), py::arg("overrides") = Overrides{}, py::arg("timeline") = false,
        "One step by the discrete-event simulator: the keys of `partune simulate --json` (and, with timeline, "
        "its events).");
  m.def("search", &search_py, py::arg("job"), py::arg("overrides") = Overrides{}, py::arg("estimator_only") = false,
        py::arg("top_k") = 32, py::arg("tokens") = 0.0, py::arg("price_per_node_hour") = 0.0,
        py::arg("memory_headroom") = 0.1,
        "The fastest configuration that fits with memory_headroom of the HBM free: the keys of `partune search "
        "--json`.");
  m.def("reproduce", &reproduce_py, py::arg("tables") = std::vector<std::string>{}, py::arg("simulator") = false,
        "Published tables against the predictions: the keys of `partune reproduce --json`.");
  m.def("sweep", &sweep_py, py::arg("job"), py::arg("vary"), py::arg("overrides") = Overrides{},
        py::arg("search") = false, py::arg("tokens") = 0.0, py::arg("threads") = 0,
        "Every combination of `vary` ({key: [values]} or ['key=v1,v2']): the keys of `partune sweep --json` "
        "(every point has the same keys; one that does not fit or is invalid has ok False and a reason).");
}
