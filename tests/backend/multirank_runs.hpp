#pragma once
// Multi-rank `partune run` against a single-process reference, the harness of the
// equivalence tests (test_parallel_equivalence.cpp, test_llama_block.cpp): each run is
// the real thing, `partune-run --nproc N` supervising N processes over Gloo, its per-step
// losses read from --json. Include after catch.hpp; needs PARTUNE_RUN_BINARY.
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace partune::test {

struct Run {
  std::vector<double> losses;
  nlohmann::json doc;
};

inline std::string read_and_remove(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::remove(path);
  return text.str();
}

// The command's exit status, standard output and standard error.
struct Outcome {
  int status = -1;
  std::string out, err;
};

inline Outcome run_command(const std::string& job, const std::string& args) {
  const std::string err = (std::filesystem::temp_directory_path() /
                           ("partune-equivalence-" + std::to_string(::getpid()) + ".err")).string();
  const std::string cmd = std::string(PARTUNE_RUN_BINARY) + " run " + job + " " + args + " 2>" + err;
  Outcome o;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return o;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) o.out.append(buf.data(), n);
  o.status = ::pclose(pipe);
  o.err = read_and_remove(err);
  return o;
}

// Runs `partune-run run JOB --json --steps STEPS <args>` and returns the per-step losses.
// Every run also checks that the layers' tensor calls all stood for tensor instructions
// of the program (a rank prints "... stand for no tensor instruction" when some did not).
inline Run run_job(const std::string& job, const std::string& args, int steps) {
  const std::string all = "--json --steps " + std::to_string(steps) + " " + args;
  INFO("partune-run run " << job << " " << all);
  const Outcome o = run_command(job, all);
  INFO(o.out);
  INFO(o.err);
  CHECK(o.err.find("stand for no tensor instruction") == std::string::npos);
  REQUIRE(WIFEXITED(o.status));
  REQUIRE(WEXITSTATUS(o.status) == 0);
  Run r;
  r.doc = nlohmann::json::parse(o.out);
  for (const auto& s : r.doc.at("steps")) r.losses.push_back(s.at("loss").get<double>());
  return r;
}

// What makes a run the one-process reference: one rank, the whole batch as one micro-batch.
inline const std::string kOneProcess = "--set 'instance_type={base: local-cpu, gpus_per_node: 1}' --set microbatches=1 ";

// The same job on one rank, the whole batch as one micro-batch (`extra`: what it shares
// with the runs it is compared with, the optimizer say); one run per (job, extra, steps).
inline const std::vector<double>& reference_losses(const std::string& job, const std::string& extra, int steps) {
  static std::map<std::pair<std::string, std::string>, std::vector<double>> cache;
  const std::pair<std::string, std::string> key{job, extra + " --steps " + std::to_string(steps)};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, run_job(job, kOneProcess + extra, steps).losses).first;
  return it->second;
}

// `args` changes the layout; `reference_args` what the reference shares with it. Checks
// the world size and every step's loss within 1e-4 relative of the reference, and that
// training moved (the last step's loss below the first's).
inline void check_equivalent(const std::string& job, const std::string& args, int world,
                             const std::string& reference_args, int steps) {
  const std::vector<double>& expected = reference_losses(job, reference_args, steps);
  REQUIRE(expected.size() == static_cast<std::size_t>(steps));
  const Run r = run_job(job, args + " " + reference_args, steps);
  INFO("partune run " << args << " " << reference_args);
  CHECK(r.doc.at("world_size").get<int>() == world);
  REQUIRE(r.losses.size() == expected.size());
  for (int i = 0; i < steps; ++i) {
    INFO("step " << i + 1 << ": " << r.losses[i] << " vs single process " << expected[i]);
    CHECK(std::abs(r.losses[i] - expected[i]) <= 1e-4 * std::abs(expected[i]));
  }
  CHECK(r.losses.back() < r.losses.front() - 0.05);
}

}  // namespace partune::test
