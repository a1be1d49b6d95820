// The rank environment, the per-rank thread count and the local supervisor
// (launcher.hpp).
#include "partune/backend/launcher.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "partune/backend/watchdog.hpp"

extern char** environ;

namespace partune::backend {

namespace {

// An unset or empty variable is absent (shells export empty variables all the time).
std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

int parse_env_int(const char* name, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE || v < INT_MIN || v > INT_MAX)
    throw std::runtime_error(fmt::format("{}={} is not an integer", name, text));
  return static_cast<int>(v);
}

}  // namespace

std::string RankEnvironment::store_host_description() const {
  return store_hosted_by_launcher ? "the launcher" : "rank 0";
}

std::optional<RankEnvironment> rank_environment_from_env() {
  const auto rank_text = env_value("RANK");
  const auto world_text = env_value("WORLD_SIZE");
  if (!rank_text && !world_text) return std::nullopt;
  if (!world_text) throw std::runtime_error(fmt::format("RANK={} is set but WORLD_SIZE is not", *rank_text));
  if (!rank_text) throw std::runtime_error(fmt::format("WORLD_SIZE={} is set but RANK is not", *world_text));

  RankEnvironment e;
  e.world_size = parse_env_int("WORLD_SIZE", *world_text);
  if (e.world_size < 1) throw std::runtime_error(fmt::format("WORLD_SIZE={} is not at least 1", e.world_size));
  e.rank = parse_env_int("RANK", *rank_text);
  if (e.rank < 0) throw std::runtime_error(fmt::format("RANK={} is negative", e.rank));
  if (e.rank >= e.world_size)
    throw std::runtime_error(fmt::format("RANK={} is not below WORLD_SIZE={}", e.rank, e.world_size));

  // Without the local variables the job is taken to run on one machine.
  e.local_world_size = e.world_size;
  if (const auto v = env_value("LOCAL_WORLD_SIZE")) {
    e.local_world_size = parse_env_int("LOCAL_WORLD_SIZE", *v);
    if (e.local_world_size < 1 || e.local_world_size > e.world_size)
      throw std::runtime_error(fmt::format("LOCAL_WORLD_SIZE={} is not between 1 and WORLD_SIZE={}",
                                           e.local_world_size, e.world_size));
  }
  e.local_rank = e.rank;
  if (const auto v = env_value("LOCAL_RANK")) {
    e.local_rank = parse_env_int("LOCAL_RANK", *v);
    if (e.local_rank < 0) throw std::runtime_error(fmt::format("LOCAL_RANK={} is negative", e.local_rank));
  }
  if (e.local_rank >= e.local_world_size)
    throw std::runtime_error(fmt::format("LOCAL_RANK={} is not below LOCAL_WORLD_SIZE={}", e.local_rank,
                                         e.local_world_size));

  if (const auto v = env_value("MASTER_ADDR")) e.master_addr = *v;
  if (const auto v = env_value("MASTER_PORT")) {
    e.master_port = parse_env_int("MASTER_PORT", *v);
    if (e.master_port < 1 || e.master_port > 65535)
      throw std::runtime_error(fmt::format("MASTER_PORT={} is not a port (1 to 65535)", e.master_port));
  } else if (e.world_size > 1) {
    throw std::runtime_error(fmt::format(
        "MASTER_PORT is not set: WORLD_SIZE={} ranks need the port of the rendezvous store", e.world_size));
  }

  if (const auto v = env_value("PARTUNE_RENDEZVOUS_TIMEOUT_S")) {
    e.rendezvous_timeout_s = parse_env_int("PARTUNE_RENDEZVOUS_TIMEOUT_S", *v);
    if (e.rendezvous_timeout_s < 1 || e.rendezvous_timeout_s > 3600)
      throw std::runtime_error(
          fmt::format("PARTUNE_RENDEZVOUS_TIMEOUT_S={} is not between 1 and 3600 seconds", e.rendezvous_timeout_s));
  }
  if (const auto v = env_value("PARTUNE_STORE_HOSTED")) {
    if (*v == "1")
      e.store_hosted_by_launcher = true;
    else if (*v != "0")
      throw std::runtime_error(fmt::format("PARTUNE_STORE_HOSTED={} is neither 1 nor 0", *v));
  }
  return e;
}

int default_threads(int local_world_size) {
  int cores = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) cores = CPU_COUNT(&set);
  if (cores <= 0) cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::max(1, cores / std::max(1, local_world_size));
}

std::string current_executable_path() {
  std::string buffer(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buffer.data(), buffer.size() - 1);
  if (n <= 0)
    throw std::runtime_error(fmt::format("cannot read /proc/self/exe: {}", std::strerror(errno)));
  buffer.resize(static_cast<std::size_t>(n));
  return buffer;
}

std::vector<std::string> current_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> args;
  std::string arg;
  while (std::getline(in, arg, '\0')) args.push_back(arg);
  return args;
}

const char* rendezvous_world_size_key() { return "partune/rendezvous/world_size"; }

// ---------------------------------------------------------------------------------------
// The supervisor.

namespace {

// What the SIGINT/SIGTERM handler needs: the ranks started so far (a reaped rank's entry
// is 0, so that a recycled pid is never signalled) and the signals received. Lock-free
// atomics are async-signal-safe; one supervisor runs at a time.
std::atomic<pid_t>* g_rank_pids = nullptr;
std::atomic<int> g_rank_count{0};
std::atomic<int> g_interrupt_signal{0};
std::atomic<int> g_interrupt_count{0};

extern "C" void forward_signal_to_ranks(int sig) {
  g_interrupt_signal.store(sig);
  g_interrupt_count.fetch_add(1);
  const int n = g_rank_count.load();
  for (int i = 0; i < n; ++i) {
    const pid_t pid = g_rank_pids[i].load();
    if (pid > 0) ::kill(pid, sig);
  }
}

// Installs the forwarding handlers for the supervisor's lifetime and restores the previous
// ones afterwards (the caller, e.g. a test, keeps its own).
class SignalForwarding {
 public:
  explicit SignalForwarding(std::atomic<pid_t>* pids) {
    g_rank_pids = pids;
    g_rank_count.store(0);
    g_interrupt_signal.store(0);
    g_interrupt_count.store(0);
    struct sigaction action {};
    action.sa_handler = forward_signal_to_ranks;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0;  // no SA_RESTART: the wait loop only sleeps anyway
    ::sigaction(SIGINT, &action, &old_int_);
    ::sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalForwarding() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    g_rank_count.store(0);
    g_rank_pids = nullptr;
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

 private:
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

const char* signal_name(int sig) {
  switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    default: return "a signal";
  }
}

std::string describe_exit(int rank, pid_t pid, int status) {
  if (WIFSIGNALED(status))
    return fmt::format("rank {} (pid {}) was killed by signal {}", rank, pid, WTERMSIG(status));
  return fmt::format("rank {} (pid {}) exited with status {}", rank, pid, WEXITSTATUS(status));
}

bool is_failure(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }

// The variables the supervisor sets; inherited values of these are replaced.
bool is_rank_variable(const char* entry) {
  static const char* const names[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",          "LOCAL_WORLD_SIZE",
                                      "MASTER_ADDR", "MASTER_PORT", "PARTUNE_STORE_HOSTED"};
  for (const char* name : names) {
    const std::size_t n = std::strlen(name);
    if (std::strncmp(entry, name, n) == 0 && entry[n] == '=') return true;
  }
  return false;
}

// Everything a forked rank needs, built before fork(): between fork() and exec() in a
// multi-threaded process (the store server runs a thread) only async-signal-safe calls
// are allowed, so no allocation happens there.
struct RankLaunch {
  std::vector<std::string> environment;
  std::vector<char*> envp;
  std::vector<char*> argv;
};

[[noreturn]] void exec_rank(const RankLaunch& launch, const char* executable, pid_t supervisor, int stdout_fd,
                            int max_fd) {
  // The supervisor's forwarding handlers and signal mask are not the rank's.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  ::sigaction(SIGINT, &default_action, nullptr);
  ::sigaction(SIGTERM, &default_action, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Die with the supervisor; and if it already died before prctl, do not start at all.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != supervisor) ::_exit(1);
  if (stdout_fd >= 0) ::dup2(stdout_fd, STDOUT_FILENO);
  // The supervisor's sockets (the store server's listening socket among them) must not
  // outlive it in a rank.
  if (::syscall(SYS_close_range, 3u, ~0u, 0u) != 0)
    for (int fd = 3; fd < max_fd; ++fd) ::close(fd);
  ::execve(executable, launch.argv.data(), launch.envp.data());
  static const char message[] = ": cannot execute this program for a rank (execve failed)\n";
  ::write(STDERR_FILENO, executable, std::strlen(executable));
  ::write(STDERR_FILENO, message, sizeof message - 1);
  ::_exit(127);
}

void sleep_briefly() { std::this_thread::sleep_for(std::chrono::milliseconds(20)); }

// The rendezvous store lives in the supervisor, so that it survives any rank.
// waitWorkers=false: the ranks connect when they start; nobody counts them in.
std::unique_ptr<c10d::TCPStore> start_rendezvous_store() {
  c10d::TCPStoreOptions store_options;
  store_options.port = 0;
  store_options.isServer = true;
  store_options.waitWorkers = false;
  try {
    return std::make_unique<c10d::TCPStore>("127.0.0.1", store_options);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("cannot start the rendezvous store on 127.0.0.1: {}", e.what()));
  }
}

// Each rank's argv and environment: the inherited one, less the rank variables, plus
// this rank's RANK, WORLD_SIZE, ... and the store's address.
std::vector<RankLaunch> prepare_rank_launches(const std::vector<std::string>& rank_argv, int nproc, int port) {
  std::vector<std::string> inherited;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry)
    if (!is_rank_variable(*entry)) inherited.emplace_back(*entry);
  std::vector<RankLaunch> launches(static_cast<std::size_t>(nproc));
  for (int r = 0; r < nproc; ++r) {
    RankLaunch& l = launches[static_cast<std::size_t>(r)];
    l.environment = inherited;
    l.environment.push_back(fmt::format("RANK={}", r));
    l.environment.push_back(fmt::format("WORLD_SIZE={}", nproc));
    l.environment.push_back(fmt::format("LOCAL_RANK={}", r));
    l.environment.push_back(fmt::format("LOCAL_WORLD_SIZE={}", nproc));
    l.environment.push_back("MASTER_ADDR=127.0.0.1");
    l.environment.push_back(fmt::format("MASTER_PORT={}", port));
    l.environment.push_back("PARTUNE_STORE_HOSTED=1");
    for (auto& s : l.environment) l.envp.push_back(s.data());
    l.envp.push_back(nullptr);
    for (const auto& a : rank_argv) l.argv.push_back(const_cast<char*>(a.c_str()));
    l.argv.push_back(nullptr);
  }
  return launches;
}

// The highest descriptor a forked rank closes when close_range is not available.
int highest_descriptor() {
  struct rlimit files {};
  return (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
             ? static_cast<int>(std::min<rlim_t>(files.rlim_cur, 65536))
             : 65536;
}

using Clock = std::chrono::steady_clock;

// How often the supervisor reads the ranks' heartbeats (their watchdogs beat every half
// second), and the pause in its own watching beyond which it does not judge them: the
// supervisor was not running (stopped with the ranks by Ctrl-Z, say), so a heartbeat that
// did not move while it was away says nothing about a rank.
constexpr auto kHeartbeatCheck = std::chrono::milliseconds(500);
constexpr auto kSupervisorAway = std::chrono::seconds(2);

// The ranks' state while they run, indexed by rank, and the supervisor's verdict.
// pids[] is what the signal handler reads.
struct Supervision {
  Supervision(c10d::TCPStore& store, int nproc, const SuperviseOptions& options)
      : store(store),
        nproc(nproc),
        options(options),
        pids(std::make_unique<std::atomic<pid_t>[]>(static_cast<std::size_t>(nproc))),
        started(static_cast<std::size_t>(nproc), 0),
        running(static_cast<std::size_t>(nproc), false),
        last_beat(static_cast<std::size_t>(nproc), -1),
        last_beat_change(static_cast<std::size_t>(nproc), Clock::now()) {}

  c10d::TCPStore& store;
  const int nproc;
  const SuperviseOptions& options;
  std::unique_ptr<std::atomic<pid_t>[]> pids;
  std::vector<pid_t> started;
  std::vector<bool> running;
  std::string failure;  // the first failure, as written under partune/failed
  int result = 0;
  std::optional<Clock::time_point> deadline;  // set when the ranks are being stopped
  bool killed = false;
  bool interrupted = false;
  // Each rank's heartbeat count as last read, and when it last moved.
  std::vector<long long> last_beat;
  std::vector<Clock::time_point> last_beat_change;
  std::optional<Clock::time_point> last_heartbeat_check;

  bool any_running() const { return std::find(running.begin(), running.end(), true) != running.end(); }

  // The first failure (or an interrupt) starts the grace period and tells the ranks.
  void stop_ranks(const std::string& why, const std::string& message) {
    const std::string& prefix = options.message_prefix;
    failure = why;
    std::cerr << prefix << ": " << message << std::endl;
    try {
      store.set(Watchdog::failed_key(), std::vector<std::uint8_t>(why.begin(), why.end()));
    } catch (const std::exception& e) {
      // The ranks are still stopped: by the grace period's SIGKILL at the latest.
      std::cerr << prefix << ": cannot tell the ranks through the store: " << e.what() << std::endl;
    }
    deadline = Clock::now() + std::chrono::seconds(std::max(0, options.grace_seconds));
  }

  void spawn_ranks(const std::vector<RankLaunch>& launches, const std::string& executable, int devnull, int max_fd) {
    const pid_t supervisor = ::getpid();
    for (int r = 0; r < nproc; ++r) {
      const int stdout_fd = (r > 0 && !options.all_ranks_stdout) ? devnull : -1;
      const pid_t pid = ::fork();
      if (pid == 0) exec_rank(launches[static_cast<std::size_t>(r)], executable.c_str(), supervisor, stdout_fd, max_fd);
      if (pid < 0) {
        const std::string why = fmt::format("cannot start rank {}: fork failed: {}", r, std::strerror(errno));
        stop_ranks(why, why + (r > 0 ? "; stopping the other ranks" : ""));
        result = 1;
        break;
      }
      started[static_cast<std::size_t>(r)] = pid;
      running[static_cast<std::size_t>(r)] = true;
      pids[static_cast<std::size_t>(r)].store(pid);
      g_rank_count.store(r + 1);
    }
  }

  // A signal that came while the ranks were starting reached only those started by then.
  void forward_early_signal() {
    if (const int sig = g_interrupt_signal.load())
      for (int r = 0; r < g_rank_count.load(); ++r)
        if (running[static_cast<std::size_t>(r)]) ::kill(started[static_cast<std::size_t>(r)], sig);
  }

  // Called before reaping: the handler sets the flag before it signals the ranks, so a
  // rank ended by a forwarded signal is never taken for a failure.
  void notice_interrupt() {
    if (const int sig = g_interrupt_signal.load(); sig != 0 && !interrupted) {
      interrupted = true;
      if (failure.empty()) {
        stop_ranks(fmt::format("the launcher was interrupted ({})", signal_name(sig)),
                   fmt::format("interrupted ({}); stopping the ranks", signal_name(sig)));
        result = 128 + sig;
      }
    }
  }

  // Collects the status of every rank that ended; the first failure stops the others.
  void reap_ended_ranks() {
    for (int r = 0; r < nproc; ++r) {
      if (!running[static_cast<std::size_t>(r)]) continue;
      const pid_t pid = started[static_cast<std::size_t>(r)];
      int status = 0;
      const pid_t got = ::waitpid(pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      running[static_cast<std::size_t>(r)] = false;
      pids[static_cast<std::size_t>(r)].store(0);
      if (got < 0) {
        // Reaped by someone else (SIGCHLD ignored by the caller): its status is unknown.
        if (failure.empty() && g_interrupt_signal.load() == 0) {
          const std::string why = fmt::format("rank {} (pid {}) ended with an unknown status", r, pid);
          stop_ranks(why, why + "; stopping the other ranks");
          result = 1;
        }
        continue;
      }
      if (is_failure(status) && failure.empty() && g_interrupt_signal.load() == 0) {
        const std::string why = describe_exit(r, pid, status);
        stop_ranks(why, any_running() ? why + "; stopping the other ranks" : why);
        result = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
      }
    }
  }

  // Once the grace period is over (at once after a second Ctrl-C), SIGKILL what is left.
  void kill_after_grace() {
    if (g_interrupt_count.load() >= 2) deadline = Clock::now();
    if (deadline && !killed && Clock::now() >= *deadline && any_running()) {
      int left = 0;
      for (int r = 0; r < nproc; ++r)
        if (running[static_cast<std::size_t>(r)]) {
          ::kill(started[static_cast<std::size_t>(r)], SIGKILL);
          ++left;
        }
      std::cerr << options.message_prefix << ": killing " << left << " rank" << (left == 1 ? "" : "s")
                << " still running after " << options.grace_seconds << " s" << std::endl;
      killed = true;
    }
  }

  // Whether rank r's heartbeat has not moved for options.silent_after while it has not
  // finished; reads the heartbeat (and notes when it moved). A rank that has not beaten yet
  // is not judged (its start is bounded by the rendezvous), nor one that sends no
  // heartbeat at all (no watchdog). Throws when the store cannot be read.
  bool heartbeat_silent(int r, Clock::time_point now, bool away) {
    const auto i = static_cast<std::size_t>(r);
    const long long beat = store.add(Watchdog::heartbeat_key(r), 0);  // add 0: reads without blocking
    if (beat != last_beat[i] || away) {
      last_beat[i] = beat;
      last_beat_change[i] = now;
      return false;
    }
    return beat > 0 && now - last_beat_change[i] >= options.silent_after && !store.check({Watchdog::done_key(r)});
  }

  // A hung rank, one whose process runs no more (stopped by SIGSTOP or a debugger, frozen),
  // neither exits nor beats, while its peers, blocked in a collective with it, go on
  // beating from their watchdogs' threads: the first silent rank is named and killed (a
  // stopped process takes no other signal), and the others are stopped as after a death.
  void stop_silent_rank() {
    if (!failure.empty() || options.silent_after.count() <= 0) return;
    const auto now = Clock::now();
    if (last_heartbeat_check && now - *last_heartbeat_check < kHeartbeatCheck) return;
    const bool away = last_heartbeat_check && now - *last_heartbeat_check > kSupervisorAway;
    last_heartbeat_check = now;
    for (int r = 0; r < nproc; ++r) {
      if (!running[static_cast<std::size_t>(r)]) continue;
      try {
        if (!heartbeat_silent(r, now, away)) continue;
      } catch (const std::exception&) {
        return;  // the store is this process's own; nothing to judge the ranks by this time
      }
      const pid_t pid = started[static_cast<std::size_t>(r)];
      const std::string why = fmt::format("rank {} (pid {}) sent no heartbeat for {:g} s", r, pid,
                                          options.silent_after.count() / 1000.0);
      stop_ranks(why, why + "; stopping the other ranks");
      ::kill(pid, SIGKILL);  // after the reason is in the store: its peers then name it
      result = 1;
      return;
    }
  }

  void watch_until_all_ended() {
    while (any_running()) {
      notice_interrupt();
      reap_ended_ranks();
      stop_silent_rank();
      kill_after_grace();
      if (any_running()) sleep_briefly();
    }
  }
};

}  // namespace

int supervise_local_ranks(const std::vector<std::string>& rank_argv, int nproc, const SuperviseOptions& options) {
  if (nproc < 1) throw std::invalid_argument(fmt::format("supervise_local_ranks: nproc={} is not at least 1", nproc));
  if (rank_argv.empty()) throw std::invalid_argument("supervise_local_ranks: no program to run for the ranks");
  const std::string executable = options.executable.empty() ? rank_argv[0] : options.executable;
  if (::access(executable.c_str(), X_OK) != 0)
    throw std::runtime_error(fmt::format("cannot run {} for the ranks: {}", executable, std::strerror(errno)));

  const std::unique_ptr<c10d::TCPStore> store = start_rendezvous_store();
  const std::string world = std::to_string(nproc);
  store->set(rendezvous_world_size_key(), std::vector<std::uint8_t>(world.begin(), world.end()));
  const std::vector<RankLaunch> launches = prepare_rank_launches(rank_argv, nproc, store->getPort());
  const int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (devnull < 0) throw std::runtime_error(fmt::format("cannot open /dev/null: {}", std::strerror(errno)));
  const int max_fd = highest_descriptor();

  Supervision supervision(*store, nproc, options);
  SignalForwarding forwarding(supervision.pids.get());
  supervision.spawn_ranks(launches, executable, devnull, max_fd);
  ::close(devnull);
  supervision.forward_early_signal();
  supervision.watch_until_all_ended();
  return supervision.result;
}

}  // namespace partune::backend
