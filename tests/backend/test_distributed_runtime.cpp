// The multi-rank runtime around the training: the launcher's environment, threads per
// rank, the local supervisor (with rank_probe as the ranks), the watchdog, sharded atomic
// checkpoints and the CPU tensor-byte accounting.
//
// Processes: the supervisor is run in this process (it forks and waits only for its own
// ranks); everything that ends a process with _Exit (the watchdog's fault path) runs in a
// rank_probe child started with fork + exec, whose exit status and stderr are checked.
//
// LibTorch first, then #undef CHECK (c10's), then catch.hpp (see test_backend.cpp).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <c10/core/CPUAllocator.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/torch.h>

#include "partune/backend/checkpoint.hpp"
#include "partune/backend/launcher.hpp"
#include "partune/backend/memory_accounting.hpp"
#include "partune/backend/watchdog.hpp"

#undef CHECK
#include <catch2/catch.hpp>

extern char** environ;

using namespace partune::backend;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

namespace {

const std::vector<std::string> kRankVariables = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",          "LOCAL_WORLD_SIZE",
                                                 "MASTER_ADDR", "MASTER_PORT", "PARTUNE_STORE_HOSTED"};

// Sets and unsets the rank variables for one test and restores what was there.
class RankVariables {
 public:
  RankVariables() {
    for (const auto& name : kRankVariables) {
      if (const char* v = std::getenv(name.c_str())) saved_[name] = v;
      ::unsetenv(name.c_str());
    }
  }
  ~RankVariables() {
    for (const auto& name : kRankVariables) ::unsetenv(name.c_str());
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  void set(const std::string& name, const std::string& value) { ::setenv(name.c_str(), value.c_str(), 1); }
  void unset(const std::string& name) { ::unsetenv(name.c_str()); }

 private:
  std::map<std::string, std::string> saved_;
};

std::string env_error() {
  try {
    rank_environment_from_env();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "partune-rt-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::unique_ptr<c10d::TCPStore> store_server() {
  c10d::TCPStoreOptions o;
  o.port = 0;
  o.isServer = true;
  o.waitWorkers = false;
  return std::make_unique<c10d::TCPStore>("127.0.0.1", o);
}

// --- processes ---------------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int stderr_fd = -1;
};

struct Ended {
  int status = 0;
  std::string stderr_text;
};

// Starts rank_probe with `args` and the rank variables `variables` (NAME=VALUE; the
// inherited ones are dropped), its stderr on a pipe.
Child spawn_probe(const std::vector<std::string>& args, const std::vector<std::string>& variables) {
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool rank_variable = false;
    for (const auto& name : kRankVariables) rank_variable |= entry.rfind(name + "=", 0) == 0;
    if (!rank_variable) environment.push_back(entry);
  }
  environment.insert(environment.end(), variables.begin(), variables.end());
  std::vector<char*> envp;
  for (auto& s : environment) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_text{RANK_PROBE_PATH};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : argv_text) argv.push_back(s.data());
  argv.push_back(nullptr);

  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  return {pid, fds[0]};
}

// Reads the child's stderr to the end and reaps it; kills it when it is still running
// after `limit`.
Ended finish_child(const Child& child, std::chrono::seconds limit = std::chrono::seconds(25)) {
  Ended out;
  const auto deadline = steady::now() + limit;
  char buffer[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady::now()).count();
    if (left <= 0) {
      ::kill(child.pid, SIGKILL);
      FAIL_CHECK("rank_probe (pid " << child.pid << ") was still running after " << limit.count() << " s");
      break;
    }
    pollfd p{child.stderr_fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::read(child.stderr_fd, buffer, sizeof buffer);
    if (n <= 0) break;
    out.stderr_text.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(child.stderr_fd);
  ::waitpid(child.pid, &out.status, 0);
  return out;
}

std::vector<std::string> probe_env(int rank, int world_size, int port, bool hosted) {
  std::vector<std::string> v{"RANK=" + std::to_string(rank), "WORLD_SIZE=" + std::to_string(world_size),
                             "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)};
  if (hosted) v.push_back("PARTUNE_STORE_HOSTED=1");
  return v;
}

// Whether the process is gone (or a zombie nobody has reaped yet: it runs no more).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] == 'Z';
}

std::vector<pid_t> read_pids(const fs::path& dir, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const fs::path p = dir / ("rank-" + std::to_string(r) + ".pid");
    if (fs::exists(p)) pids.push_back(static_cast<pid_t>(std::stol(read_text(p))));
  }
  return pids;
}

// Runs `f` with this process's stdout and stderr (and so the ranks') going to files.
struct Captured {
  std::string out, err;
};
Captured capture_output(const std::function<void()>& f) {
  TempDir dir;
  const fs::path out_path = dir.path / "stdout", err_path = dir.path / "stderr";
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const int saved_out = ::dup(STDOUT_FILENO), saved_err = ::dup(STDERR_FILENO);
  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  auto restore = [&] {
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    ::dup2(saved_out, STDOUT_FILENO);
    ::dup2(saved_err, STDERR_FILENO);
    ::close(saved_out);
    ::close(saved_err);
    ::close(out_fd);
    ::close(err_fd);
  };
  try {
    f();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return {read_text(out_path), read_text(err_path)};
}

struct Supervised {
  int result = -1;
  double seconds = 0;
  Captured output;
  std::vector<pid_t> pids;
};

// supervise_local_ranks over rank_probe `args`, with the pid files in `pid_dir`.
Supervised supervise_probes(int nproc, const std::vector<std::string>& args, const TempDir& pid_dir,
                            int grace_seconds = 20) {
  std::vector<std::string> rank_argv{RANK_PROBE_PATH, "--pid-dir", pid_dir.str()};
  rank_argv.insert(rank_argv.end(), args.begin(), args.end());
  SuperviseOptions options;
  options.grace_seconds = grace_seconds;
  Supervised s;
  const auto start = steady::now();
  s.output = capture_output([&] { s.result = supervise_local_ranks(rank_argv, nproc, options); });
  s.seconds = std::chrono::duration<double>(steady::now() - start).count();
  s.pids = read_pids(pid_dir.path, nproc);
  return s;
}

}  // namespace

// --- the rank environment ----------------------------------------------------------------

TEST_CASE("rank environment: absent, complete, defaults", "[launcher]") {
  RankVariables vars;
  REQUIRE_FALSE(rank_environment_from_env().has_value());

  vars.set("RANK", "3");
  vars.set("WORLD_SIZE", "8");
  vars.set("LOCAL_RANK", "1");
  vars.set("LOCAL_WORLD_SIZE", "2");
  vars.set("MASTER_ADDR", "node7");
  vars.set("MASTER_PORT", "29511");
  vars.set("PARTUNE_STORE_HOSTED", "1");
  auto e = rank_environment_from_env();
  REQUIRE(e.has_value());
  CHECK(e->rank == 3);
  CHECK(e->world_size == 8);
  CHECK(e->local_rank == 1);
  CHECK(e->local_world_size == 2);
  CHECK(e->master_addr == "node7");
  CHECK(e->master_port == 29511);
  CHECK(e->store_hosted_by_launcher);
  CHECK_FALSE(e->hosts_store());
  CHECK(e->store_host_description() == "the launcher");

  // torchrun's minimum: the local variables default to one machine, rank 0 hosts the store.
  vars.unset("LOCAL_RANK");
  vars.unset("LOCAL_WORLD_SIZE");
  vars.unset("MASTER_ADDR");
  vars.unset("PARTUNE_STORE_HOSTED");
  vars.set("RANK", "0");
  e = rank_environment_from_env();
  REQUIRE(e.has_value());
  CHECK(e->local_rank == 0);
  CHECK(e->local_world_size == 8);
  CHECK(e->master_addr == "127.0.0.1");
  CHECK_FALSE(e->store_hosted_by_launcher);
  CHECK(e->hosts_store());
  CHECK(e->store_host_description() == "rank 0");

  // One rank needs no store port.
  vars.set("WORLD_SIZE", "1");
  vars.unset("MASTER_PORT");
  e = rank_environment_from_env();
  REQUIRE(e.has_value());
  CHECK(e->world_size == 1);
  CHECK(e->master_port == 0);
}

TEST_CASE("rank environment: partial or invalid values are named", "[launcher]") {
  RankVariables vars;
  vars.set("RANK", "5");
  CHECK_THAT(env_error(), Contains("RANK=5 is set but WORLD_SIZE is not"));
  vars.unset("RANK");
  vars.set("WORLD_SIZE", "4");
  CHECK_THAT(env_error(), Contains("WORLD_SIZE=4 is set but RANK is not"));
  vars.set("RANK", "5");
  vars.set("MASTER_PORT", "29500");
  CHECK_THAT(env_error(), Contains("RANK=5 is not below WORLD_SIZE=4"));
  vars.set("RANK", "two");
  CHECK_THAT(env_error(), Contains("RANK=two is not an integer"));
  vars.set("RANK", "-1");
  CHECK_THAT(env_error(), Contains("RANK=-1 is negative"));
  vars.set("RANK", "1");
  vars.set("WORLD_SIZE", "0");
  CHECK_THAT(env_error(), Contains("WORLD_SIZE=0 is not at least 1"));
  vars.set("WORLD_SIZE", "4");
  vars.unset("MASTER_PORT");
  CHECK_THAT(env_error(), Contains("MASTER_PORT is not set"));
  vars.set("MASTER_PORT", "70000");
  CHECK_THAT(env_error(), Contains("MASTER_PORT=70000 is not a port"));
  vars.set("MASTER_PORT", "29500");
  vars.set("LOCAL_WORLD_SIZE", "2");
  vars.set("LOCAL_RANK", "2");
  CHECK_THAT(env_error(), Contains("LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"));
  vars.set("LOCAL_WORLD_SIZE", "5");
  CHECK_THAT(env_error(), Contains("LOCAL_WORLD_SIZE=5 is not between 1 and WORLD_SIZE=4"));
  vars.unset("LOCAL_WORLD_SIZE");
  vars.unset("LOCAL_RANK");
  vars.set("PARTUNE_STORE_HOSTED", "yes");
  CHECK_THAT(env_error(), Contains("PARTUNE_STORE_HOSTED=yes is neither 1 nor 0"));
  vars.set("PARTUNE_STORE_HOSTED", "0");
  CHECK(rank_environment_from_env().has_value());
}

TEST_CASE("default_threads shares this process's cores among the local ranks", "[launcher]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  const int cores = CPU_COUNT(&set);
  CHECK(default_threads(1) == cores);
  CHECK(default_threads(0) == cores);
  CHECK(default_threads(2) == std::max(1, cores / 2));
  CHECK(default_threads(cores * 4) == 1);
}

// --- the supervisor ----------------------------------------------------------------------

TEST_CASE("supervisor: every rank exits 0, only rank 0 prints", "[launcher][processes]") {
  TempDir pids;
  const Supervised s = supervise_probes(2, {"ok"}, pids);
  INFO("stderr:\n" << s.output.err);
  CHECK(s.result == 0);
  CHECK_THAT(s.output.out, Contains("rank 0 says hello"));
  CHECK_THAT(s.output.out, !Contains("rank 1 says hello"));
  CHECK(s.output.err.empty());
  REQUIRE(s.pids.size() == 2);
  for (pid_t pid : s.pids) CHECK(process_gone(pid));
}

TEST_CASE("supervisor: a killed rank stops the others within seconds", "[launcher][processes]") {
  TempDir pids;
  const Supervised s = supervise_probes(3, {"die", "2"}, pids);
  INFO("stderr:\n" << s.output.err);
  CHECK(s.result != 0);
  CHECK(s.seconds < 30);
  REQUIRE(s.pids.size() == 3);
  const std::string dead = "rank 2 (pid " + std::to_string(s.pids[2]) + ") was killed by signal 9";
  CHECK_THAT(s.output.err, Contains("partune run: " + dead + "; stopping the other ranks"));
  CHECK_THAT(s.output.err, Contains("partune run: rank 0: stopping: " + dead));
  CHECK_THAT(s.output.err, Contains("partune run: rank 1: stopping: " + dead));
  CHECK_THAT(s.output.err, !Contains("never stopped"));
  for (pid_t pid : s.pids) CHECK(process_gone(pid));
}

TEST_CASE("supervisor: a rank's exit status is returned and named", "[launcher][processes]") {
  TempDir pids;
  const Supervised s = supervise_probes(2, {"exit", "1", "3"}, pids);
  INFO("stderr:\n" << s.output.err);
  CHECK(s.result == 3);
  REQUIRE(s.pids.size() == 2);
  const std::string failed = "rank 1 (pid " + std::to_string(s.pids[1]) + ") exited with status 3";
  CHECK_THAT(s.output.err, Contains("partune run: " + failed + "; stopping the other ranks"));
  CHECK_THAT(s.output.err, Contains("partune run: rank 0: stopping: " + failed));
  for (pid_t pid : s.pids) CHECK(process_gone(pid));
}

TEST_CASE("supervisor: a rank that does not stop is killed after the grace period", "[launcher][processes]") {
  TempDir pids;
  // Rank 0 runs no watchdog, so nothing tells it to stop.
  const Supervised s = supervise_probes(2, {"--no-watchdog-rank", "0", "die", "1"}, pids, /*grace_seconds=*/1);
  INFO("stderr:\n" << s.output.err);
  CHECK(s.result == 1);
  CHECK(s.seconds < 15);
  CHECK_THAT(s.output.err, Contains("killing 1 rank still running after 1 s"));
  REQUIRE(s.pids.size() == 2);
  for (pid_t pid : s.pids) CHECK(process_gone(pid));
}

TEST_CASE("supervisor: SIGTERM is passed on to the ranks", "[launcher][processes]") {
  TempDir pids;
  std::thread terminator([&] {
    // Once both ranks are up, terminate the supervisor (this process: its handler is
    // installed for the call).
    const auto deadline = steady::now() + std::chrono::seconds(20);
    while (read_pids(pids.path, 2).size() < 2 && steady::now() < deadline)
      std::this_thread::sleep_for(milliseconds(20));
    ::kill(::getpid(), SIGTERM);
  });
  const Supervised s = supervise_probes(2, {"hang"}, pids);
  terminator.join();
  INFO("stderr:\n" << s.output.err);
  CHECK(s.result == 128 + SIGTERM);
  CHECK_THAT(s.output.err, Contains("partune run: interrupted (SIGTERM); stopping the ranks"));
  CHECK(s.seconds < 20);
  REQUIRE(s.pids.size() == 2);
  for (pid_t pid : s.pids) CHECK(process_gone(pid));
}

TEST_CASE("supervisor: the ranks die with a killed supervisor", "[launcher][processes]") {
  TempDir pids;
  const Child supervisor = spawn_probe({"--pid-dir", pids.str(), "supervise", "2", "20", "hang"}, {});
  const auto deadline = steady::now() + std::chrono::seconds(20);
  while (read_pids(pids.path, 2).size() < 2 && steady::now() < deadline) std::this_thread::sleep_for(milliseconds(20));
  const std::vector<pid_t> ranks = read_pids(pids.path, 2);
  REQUIRE(ranks.size() == 2);
  ::kill(supervisor.pid, SIGKILL);
  const Ended ended = finish_child(supervisor);
  CHECK(WIFSIGNALED(ended.status));
  for (pid_t pid : ranks) {
    const auto until = steady::now() + std::chrono::seconds(5);
    while (!process_gone(pid) && steady::now() < until) std::this_thread::sleep_for(milliseconds(20));
    CHECK(process_gone(pid));
  }
}

TEST_CASE("supervisor: arguments are checked before anything starts", "[launcher]") {
  CHECK_THROWS_AS(supervise_local_ranks({}, 2), std::invalid_argument);
  CHECK_THROWS_AS(supervise_local_ranks({RANK_PROBE_PATH}, 0), std::invalid_argument);
  CHECK_THROWS_WITH(supervise_local_ranks({"/nonexistent/partune-run"}, 2), Contains("/nonexistent/partune-run"));
}

// --- the watchdog ------------------------------------------------------------------------

TEST_CASE("watchdog: heartbeats, and a finished peer is not a dead one", "[watchdog]") {
  auto server = store_server();
  RankEnvironment env;
  env.world_size = 2;
  env.master_port = server->getPort();
  env.store_hosted_by_launcher = false;  // the peers watch each other's heartbeats
  WatchdogOptions options;
  options.interval = milliseconds(50);
  options.stale_after = milliseconds(400);
  RankEnvironment env1 = env;
  env1.rank = 1;
  Watchdog rank0(env, options);
  Watchdog rank1(env1, options);
  std::this_thread::sleep_for(milliseconds(300));
  CHECK(rank0.heartbeats() >= 2);
  CHECK(server->add(Watchdog::heartbeat_key(0), 0) >= 2);
  CHECK(server->add(Watchdog::heartbeat_key(1), 0) >= 2);

  rank1.finish();
  CHECK(server->check({Watchdog::done_key(1)}));
  // Rank 1's heartbeat stops for longer than stale_after; rank 0 must keep running (a
  // stop would end this test process).
  const long long before = rank0.heartbeats();
  std::this_thread::sleep_for(milliseconds(1000));
  CHECK(rank0.heartbeats() > before + 5);
  CHECK_FALSE(server->check({Watchdog::failed_key()}));
  rank0.finish();
  rank0.finish();  // idempotent

  // A rank that fails names the cause for the others; the first cause stays.
  rank0.report_failure("rank 0: out of memory");
  rank1.report_failure("rank 1: something else");
  const auto cause = server->get(Watchdog::failed_key());
  CHECK(std::string(cause.begin(), cause.end()) == "rank 0: out of memory");
}

TEST_CASE("watchdog: an unreachable store is a clear error", "[watchdog]") {
  RankEnvironment env;
  env.world_size = 2;
  env.master_port = free_port();
  WatchdogOptions options;
  options.connect_timeout = milliseconds(1000);
  CHECK_THROWS_WITH(Watchdog(env, options),
                    Contains("cannot reach the rendezvous store at 127.0.0.1:" + std::to_string(env.master_port) +
                             " (hosted by rank 0)"));
}

TEST_CASE("watchdog: partune/failed stops the rank with the launcher's reason", "[watchdog][processes]") {
  auto server = store_server();
  const Child rank0 = spawn_probe({"--interval-ms", "100", "hang"}, probe_env(0, 2, server->getPort(), true));
  server->add("probe/ready", 1);  // stands in for rank 1
  std::this_thread::sleep_for(milliseconds(200));
  const std::string why = "rank 1 (pid 4242) was killed by signal 9";
  server->set(Watchdog::failed_key(), std::vector<std::uint8_t>(why.begin(), why.end()));
  const auto start = steady::now();
  const Ended ended = finish_child(rank0);
  INFO("stderr:\n" << ended.stderr_text);
  CHECK(std::chrono::duration<double>(steady::now() - start).count() < 10);
  CHECK(WIFEXITED(ended.status));
  CHECK(WEXITSTATUS(ended.status) == 1);
  CHECK_THAT(ended.stderr_text, Contains("partune run: rank 0: stopping: " + why));
}

TEST_CASE("watchdog: without a launcher, a silent peer stops the others", "[watchdog][processes]") {
  // torchrun's layout: rank 0 hosts the store; rank 1 kills itself.
  const int port = free_port();
  const std::vector<std::string> args{"--interval-ms", "100", "--stale-ms", "1000", "die", "1"};
  const Child rank0 = spawn_probe(args, probe_env(0, 2, port, false));
  const Child rank1 = spawn_probe(args, probe_env(1, 2, port, false));
  const auto start = steady::now();
  const Ended ended1 = finish_child(rank1);
  const Ended ended0 = finish_child(rank0);
  INFO("rank 0 stderr:\n" << ended0.stderr_text << "rank 1 stderr:\n" << ended1.stderr_text);
  CHECK(std::chrono::duration<double>(steady::now() - start).count() < 15);
  CHECK(WIFSIGNALED(ended1.status));
  CHECK(WIFEXITED(ended0.status));
  CHECK(WEXITSTATUS(ended0.status) == 1);
  CHECK_THAT(ended0.stderr_text, Contains("partune run: rank 0: stopping: rank 1 sent no heartbeat for 1 s"));
}

TEST_CASE("watchdog: without a launcher, losing the store host stops the others", "[watchdog][processes]") {
  const int port = free_port();
  const std::vector<std::string> args{"--interval-ms", "100", "--stale-ms", "5000", "die", "0"};
  const Child rank0 = spawn_probe(args, probe_env(0, 2, port, false));
  const Child rank1 = spawn_probe(args, probe_env(1, 2, port, false));
  const Ended ended0 = finish_child(rank0);
  const Ended ended1 = finish_child(rank1);
  INFO("rank 0 stderr:\n" << ended0.stderr_text << "rank 1 stderr:\n" << ended1.stderr_text);
  CHECK(WIFSIGNALED(ended0.status));
  CHECK(WIFEXITED(ended1.status));
  CHECK(WEXITSTATUS(ended1.status) == 1);
  CHECK_THAT(ended1.stderr_text, Contains("partune run: rank 1: stopping: lost the rendezvous store at 127.0.0.1:" +
                                          std::to_string(port) + " (hosted by rank 0)"));
}

// --- checkpoints -------------------------------------------------------------------------

namespace {

torch::Tensor shard_tensor(int step, int rank) {
  return torch::arange(0, 12, torch::kFloat32).reshape({3, 4}) * static_cast<float>(100 * step + rank + 1);
}

void write_step(const std::string& dir, int step, int world_size) {
  for (int r = 0; r < world_size; ++r)
    write_rank_shard(dir, step, r, [&](torch::serialize::OutputArchive& a) {
      a.write("weight", shard_tensor(step, r));
      a.write("step", torch::tensor(static_cast<int64_t>(step)));
    });
}

void save_step(const std::string& dir, int step, int world_size) {
  write_step(dir, step, world_size);
  commit_checkpoint(dir, step, world_size, {{"tensor", world_size}, {"stages", 1}});
}

torch::Tensor read_weight(const std::string& dir, int step, int rank) {
  torch::Tensor w;
  read_rank_shard(dir, step, rank, [&](torch::serialize::InputArchive& a) { a.read("weight", w); });
  return w;
}

std::string checkpoint_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("checkpoint: round trip of sharded state and meta", "[checkpoint]") {
  TempDir dir;
  const std::string ckpt = (dir.path / "ckpt").string();  // created by the first shard
  CHECK_FALSE(latest_checkpoint_step(ckpt).has_value());
  save_step(ckpt, 1, 2);
  REQUIRE(latest_checkpoint_step(ckpt) == 1);
  CHECK(read_text(fs::path(ckpt) / "latest") == "step-1\n");
  CHECK(fs::exists(fs::path(ckpt) / "step-1" / "rank-0.pt"));
  CHECK(fs::exists(fs::path(ckpt) / "step-1" / "rank-1.pt"));
  CHECK_FALSE(fs::exists(fs::path(ckpt) / ".partial-step-1"));

  const nlohmann::json meta = read_checkpoint_meta(ckpt, 1);
  CHECK(meta["step"] == 1);
  CHECK(meta["world_size"] == 2);
  CHECK(meta["layout"]["tensor"] == 2);

  for (int r = 0; r < 2; ++r) CHECK(torch::equal(read_weight(ckpt, 1, r), shard_tensor(1, r)));
  torch::Tensor step;
  read_rank_shard(ckpt, 1, 1, [&](torch::serialize::InputArchive& a) { a.read("step", step); });
  CHECK(step.item<int64_t>() == 1);

  CHECK_THAT(checkpoint_error([&] { read_weight(ckpt, 1, 2); }), Contains("was saved by 2 ranks; there is no shard for rank 2"));
  CHECK_THAT(checkpoint_error([&] { read_checkpoint_meta(ckpt, 7); }), Contains("step-7: does not exist"));
  CHECK_THAT(checkpoint_error([&] {
               torch::Tensor t;
               read_rank_shard(ckpt, 1, 0, [&](torch::serialize::InputArchive& a) { a.read("missing", t); });
             }),
             Contains("rank-0.pt: does not hold what rank 0 expects"));
}

TEST_CASE("checkpoint: a crash during a save leaves the previous one behind latest", "[checkpoint]") {
  TempDir dir;
  const std::string ckpt = dir.str();
  save_step(ckpt, 1, 2);

  // Crash before the commit: the shards of step 2 are written, nothing else.
  write_step(ckpt, 2, 2);
  CHECK(fs::exists(dir.path / ".partial-step-2" / "rank-1.pt"));
  REQUIRE(latest_checkpoint_step(ckpt) == 1);
  CHECK(torch::equal(read_weight(ckpt, 1, 0), shard_tensor(1, 0)));

  // Crash in the middle of a commit: one shard missing is refused, latest unchanged.
  fs::remove(dir.path / ".partial-step-2" / "rank-1.pt");
  CHECK_THAT(checkpoint_error([&] { commit_checkpoint(ckpt, 2, 2, {}); }), Contains("rank 1 missing"));
  CHECK(latest_checkpoint_step(ckpt) == 1);

  // The save is redone and committed.
  save_step(ckpt, 2, 2);
  REQUIRE(latest_checkpoint_step(ckpt) == 2);
  CHECK(torch::equal(read_weight(ckpt, 2, 1), shard_tensor(2, 1)));
  CHECK(fs::exists(dir.path / "step-1"));  // the one before is kept

  // Crash between the rename of the directory and that of latest: step-3 exists, latest
  // still names step 2, which is intact.
  save_step(ckpt, 3, 2);
  std::ofstream(dir.path / "latest") << "step-2\n";  // as before the final rename
  CHECK(latest_checkpoint_step(ckpt) == 2);
  CHECK(torch::equal(read_weight(ckpt, 2, 0), shard_tensor(2, 0)));

  // Crash while replacing step-2 by a new save of step 2: the old directory was moved
  // away and the new one not yet moved in. latest still reads step 2 (the moved copy).
  fs::rename(dir.path / "step-2", dir.path / ".replaced-step-2");
  REQUIRE(latest_checkpoint_step(ckpt) == 2);
  CHECK(read_checkpoint_meta(ckpt, 2)["world_size"] == 2);
  CHECK(torch::equal(read_weight(ckpt, 2, 1), shard_tensor(2, 1)));
  // Saving step 2 again completes the replacement.
  save_step(ckpt, 2, 2);
  CHECK(fs::exists(dir.path / "step-2"));
  CHECK_FALSE(fs::exists(dir.path / ".replaced-step-2"));
  CHECK(latest_checkpoint_step(ckpt) == 2);
}

TEST_CASE("checkpoint: only latest and the one before are kept", "[checkpoint]") {
  TempDir dir;
  const std::string ckpt = dir.str();
  for (int step : {1, 2, 3, 4}) save_step(ckpt, step, 1);
  CHECK_FALSE(fs::exists(dir.path / "step-1"));
  CHECK_FALSE(fs::exists(dir.path / "step-2"));
  CHECK(fs::exists(dir.path / "step-3"));
  CHECK(fs::exists(dir.path / "step-4"));
  // An abandoned save of an earlier step is cleaned up by the next commit.
  write_step(ckpt, 2, 1);
  save_step(ckpt, 5, 1);
  CHECK_FALSE(fs::exists(dir.path / ".partial-step-2"));
  CHECK_FALSE(fs::exists(dir.path / "step-3"));
  CHECK(fs::exists(dir.path / "step-4"));
  CHECK(latest_checkpoint_step(ckpt) == 5);
  // Shards of a larger earlier attempt are not part of a smaller commit.
  write_step(ckpt, 6, 3);
  save_step(ckpt, 6, 2);
  CHECK_FALSE(fs::exists(dir.path / "step-6" / "rank-2.pt"));
  CHECK(read_checkpoint_meta(ckpt, 6)["world_size"] == 2);
}

TEST_CASE("checkpoint: a broken latest is named", "[checkpoint]") {
  TempDir dir;
  std::ofstream(dir.path / "latest") << "garbage\n";
  CHECK_THAT(checkpoint_error([&] { latest_checkpoint_step(dir.str()); }), Contains("holds 'garbage', not step-<N>"));
  std::ofstream(dir.path / "latest") << "step-9\n";
  CHECK_THAT(checkpoint_error([&] { latest_checkpoint_step(dir.str()); }), Contains("names step-9, which does not exist"));
}

// --- memory accounting -------------------------------------------------------------------

TEST_CASE("memory accounting counts tensor bytes and the peak", "[memory]") {
  install_cpu_memory_accounting();
  install_cpu_memory_accounting();  // idempotent
  REQUIRE(cpu_memory_accounting_installed());

  const std::int64_t base = cpu_tensor_bytes_in_use();
  reset_cpu_tensor_bytes_peak();
  CHECK(cpu_tensor_bytes_peak() == base);
  {
    torch::Tensor one_mb = torch::empty({262144}, torch::kFloat32);  // 1 MiB
    CHECK(cpu_tensor_bytes_in_use() - base == 1048576);
    CHECK(cpu_tensor_bytes_peak() - base >= 1048576);
  }
  CHECK(cpu_tensor_bytes_in_use() == base);
  CHECK(cpu_tensor_bytes_peak() - base >= 1048576);  // the peak remembers

  torch::Tensor a = torch::ones({256, 256}), b = torch::ones({256, 256});  // 256 KiB each
  CHECK(cpu_tensor_bytes_in_use() - base == 2 * 262144);
  reset_cpu_tensor_bytes_peak();
  torch::Tensor c = torch::matmul(a, b);
  CHECK(cpu_tensor_bytes_in_use() - base >= 3 * 262144);
  CHECK(cpu_tensor_bytes_peak() >= cpu_tensor_bytes_in_use());
  CHECK(c[0][0].item<float>() == 256.0f);
  c = torch::Tensor();
  a = torch::Tensor();
  b = torch::Tensor();
  CHECK(cpu_tensor_bytes_in_use() == base);

  // Autograd and an optimizer step allocate through the wrapper as well.
  {
    torch::Tensor w = torch::randn({64, 64}, torch::requires_grad());
    torch::optim::Adam adam({w}, torch::optim::AdamOptions(1e-3));
    reset_cpu_tensor_bytes_peak();
    w.matmul(w).sum().backward();
    adam.step();
    CHECK(w.grad().defined());
    CHECK(cpu_tensor_bytes_peak() - base >= 3 * 64 * 64 * 4);  // w, its gradient, Adam's moments
  }
  CHECK(cpu_tensor_bytes_in_use() == base);

  // The raw interface (used by some kernels) keeps working through the wrapper.
  c10::Allocator* cpu = c10::GetCPUAllocator();
  if (cpu->raw_deleter() != nullptr) {
    void* p = cpu->raw_allocate(4096);
    CHECK(cpu_tensor_bytes_in_use() - base == 4096);
    cpu->raw_deallocate(p);
    CHECK(cpu_tensor_bytes_in_use() == base);
  }
}
