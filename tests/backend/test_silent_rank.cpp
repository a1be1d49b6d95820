// A hung rank under `partune run --nproc 2` (issue 53 item 5): rank 1 is stopped with
// SIGSTOP in the middle of training. It neither exits nor beats, while rank 0, blocked in a
// collective with it, goes on beating from its watchdog's thread. The supervisor must name
// rank 1 within its 10 s heartbeat timeout (not Gloo's 120 s collective timeout, after
// which rank 0 failed and was blamed), stop rank 0, leave nothing running and exit 1.
// The run is the real thing: `partune-run` supervising 2 processes over Gloo.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using steady = std::chrono::steady_clock;

namespace {

const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-parallel.yaml";

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "partune-silent-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// `partune-run run JOB --nproc 2 --steps 1000000`, stdout and stderr into `dir`, without
// any rank variable of this process's environment (it must be the launcher).
pid_t start_run(const TempDir& dir) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                             "PARTUNE_STORE_HOSTED"})
      ::unsetenv(name);
    const int out = ::open((dir.path / "out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open((dir.path / "err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execl(PARTUNE_RUN_BINARY, PARTUNE_RUN_BINARY, "run", kJob.c_str(), "--nproc", "2", "--steps", "1000000",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// The supervisor's children by their RANK variable.
std::map<int, pid_t> rank_pids(pid_t supervisor) {
  std::map<int, pid_t> ranks;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    static const std::regex ppid_line("\nPPid:\t([0-9]+)\n");
    std::smatch m;
    const std::string status = read_text(entry.path() / "status");
    if (!std::regex_search(status, m, ppid_line) || std::stol(m[1]) != supervisor) continue;
    std::stringstream environment(read_text(entry.path() / "environ"));
    for (std::string variable; std::getline(environment, variable, '\0');)
      if (variable.rfind("RANK=", 0) == 0) ranks[std::stoi(variable.substr(5))] = static_cast<pid_t>(std::stol(name));
  }
  return ranks;
}

// Whether the process is gone (or a zombie: it runs no more).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < stat.size() && stat[close_paren + 2] == 'Z';
}

// Waits up to `limit` for the process; its wait status, or nothing when it still runs.
std::optional<int> wait_for(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = steady::now() + limit;
  for (;;) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    if (steady::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

TEST_CASE("partune run: a rank stopped with SIGSTOP is named by the supervisor within 15 s",
          "[backend][multirank][watchdog]") {
  TempDir dir;
  const pid_t supervisor = start_run(dir);
  // Training has started once rank 0 printed step 1.
  static const std::regex first_step("(^|\n) +1 ");
  const auto started = steady::now() + std::chrono::seconds(20);
  while (!std::regex_search(read_text(dir.path / "out"), first_step) && steady::now() < started)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const std::map<int, pid_t> ranks = rank_pids(supervisor);
  INFO("stdout:\n" << read_text(dir.path / "out") << "\nstderr:\n" << read_text(dir.path / "err"));
  if (ranks.size() != 2 || !std::regex_search(read_text(dir.path / "out"), first_step)) {
    ::kill(supervisor, SIGKILL);
    ::waitpid(supervisor, nullptr, 0);
    FAIL("no step ran within 20 s, or not 2 ranks (found " << ranks.size() << ")");
  }
  const pid_t silent = ranks.at(1);

  const auto stop = steady::now();
  REQUIRE(::kill(silent, SIGSTOP) == 0);
  std::optional<int> status = wait_for(supervisor, std::chrono::seconds(20));
  const double seconds = std::chrono::duration<double>(steady::now() - stop).count();
  if (!status) {
    ::kill(supervisor, SIGKILL);  // the ranks die with it (PR_SET_PDEATHSIG)
    status = wait_for(supervisor, std::chrono::seconds(5));
  }
  const std::string err = read_text(dir.path / "err");
  INFO("stderr:\n" << err << "ended " << seconds << " s after the SIGSTOP");
  CHECK(seconds < 15);
  CHECK(seconds > 9);  // the heartbeat's 10 s, not sooner (a beat is at most 1 s old when seen)
  REQUIRE(status.has_value());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 1);
  const std::string named = "rank 1 (pid " + std::to_string(silent) + ") sent no heartbeat for 10 s";
  CHECK_THAT(err, Contains("partune run: " + named + "; stopping the other ranks"));
  CHECK_THAT(err, Contains("partune run: rank 0: stopping: " + named));
  CHECK_THAT(err, !Contains("rank 0 (pid"));  // the healthy rank is not blamed
  for (const auto& [rank, pid] : ranks) {
    const auto until = steady::now() + std::chrono::seconds(5);
    while (!process_gone(pid) && steady::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(process_gone(pid));
  }
}
