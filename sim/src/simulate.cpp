// simulate() and simulate_each(): each simulation runs World in a forked child (SimGrid
// keeps one engine per process) and brings the result back over a pipe in a flat binary
// form. The calling thread forks and waits for every child itself (poll), so no process
// that forks runs threads.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "partune/costmodel/simulation_size.hpp"
#include "partune/sim/simulator.hpp"
#include "world.hpp"

namespace partune::sim {

namespace {

class Writer {
 public:
  template <class T> void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    buf_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) {
    put(s.size());
    buf_ += s;
  }
  template <class T> void put_vector(const std::vector<T>& v) {
    put(v.size());
    for (const auto& x : v) put(x);
  }
  const std::string& bytes() const { return buf_; }

 private:
  std::string buf_;
};

class Reader {
 public:
  explicit Reader(const std::string& b) : buf_(b) {}
  template <class T> void get(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (pos_ + sizeof v > buf_.size()) throw std::runtime_error("simulator: truncated result from the child");
    std::memcpy(&v, buf_.data() + pos_, sizeof v);
    pos_ += sizeof v;
  }
  void get(std::string& s) {
    std::size_t n = 0;
    get(n);
    if (pos_ + n > buf_.size()) throw std::runtime_error("simulator: truncated result from the child");
    s.assign(buf_.data() + pos_, n);
    pos_ += n;
  }
  template <class T> void get_vector(std::vector<T>& v) {
    std::size_t n = 0;
    get(n);
    v.resize(n);
    for (auto& x : v) get(x);
  }

 private:
  const std::string& buf_;
  std::size_t pos_ = 0;
};

// The step's figures: the headline numbers, the breakdown and memory (plain values, each
// in one piece), the verdict and its reason.
void encode(Writer& w, const StepMetrics& e) {
  w.put(e.step_time), w.put(e.samples_per_s), w.put(e.tokens_per_s), w.put(e.model_flops);
  w.put(e.hardware_flops), w.put(e.tflops_per_gpu), w.put(e.hw_tflops_per_gpu), w.put(e.mfu);
  w.put(e.breakdown), w.put(e.memory), w.put(e.memory_capacity), w.put(e.fits), w.put(e.not_fit_reason);
}

void decode(Reader& rd, StepMetrics& e) {
  rd.get(e.step_time), rd.get(e.samples_per_s), rd.get(e.tokens_per_s), rd.get(e.model_flops);
  rd.get(e.hardware_flops), rd.get(e.tflops_per_gpu), rd.get(e.hw_tflops_per_gpu), rd.get(e.mfu);
  rd.get(e.breakdown), rd.get(e.memory), rd.get(e.memory_capacity), rd.get(e.fits), rd.get(e.not_fit_reason);
}

void encode(Writer& w, const SimResult& r) {
  encode(w, r.metrics);
  encode(w, r.estimated);
  w.put_vector(r.stage_utilisation);
  w.put(r.bubble_fraction), w.put(r.exposed);
  w.put_vector(r.ranks);
  w.put_vector(r.events);
  w.put(r.symmetric), w.put(r.activities), w.put(r.wall_seconds), w.put(r.peak_process_bytes);
}

void decode(Reader& rd, SimResult& r) {
  decode(rd, r.metrics);
  decode(rd, r.estimated);
  rd.get_vector(r.stage_utilisation);
  rd.get(r.bubble_fraction), rd.get(r.exposed);
  rd.get_vector(r.ranks);
  rd.get_vector(r.events);
  rd.get(r.symmetric), rd.get(r.activities), rd.get(r.wall_seconds), rd.get(r.peak_process_bytes);
}

}  // namespace

std::string encode_outcome(const SimOutcome& o) {
  Writer w;
  w.put(o.ok);
  w.put(o.error);
  if (o.ok) encode(w, o.result);
  return w.bytes();
}

SimOutcome decode_outcome(const std::string& bytes) {
  Reader rd(bytes);
  SimOutcome o;
  rd.get(o.ok);
  rd.get(o.error);
  if (o.ok) decode(rd, o.result);
  return o;
}

namespace {

bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Threads this process runs (1: the caller alone); 0 when /proc cannot say.
int thread_count() {
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return 0;
  int n = 0;
  while (const dirent* e = ::readdir(dir))
    if (e->d_name[0] != '.') ++n;
  ::closedir(dir);
  return n;
}

// The child: dies with its parent, simulates, writes the result (or 'E' + the message)
// to `fd` and exits without running the parent's destructors or atexit handlers.
[[noreturn]] void run_child(const Job& job, const SimOptions& options, int fd, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(4);  // the parent ended before prctl took effect
  int status = 0;
  try {
    if (options.in_child) options.in_child(job);
    World world(job, options);
    SimResult r = world.run();
    rusage usage{};
    if (::getrusage(RUSAGE_SELF, &usage) == 0) r.peak_process_bytes = 1024.0 * static_cast<double>(usage.ru_maxrss);
    Writer w;
    encode(w, r);
    status = write_all(fd, w.bytes()) ? 0 : 3;
  } catch (const std::exception& e) {
    write_all(fd, std::string("E") + e.what());
    status = 2;
  }
  ::close(fd);
  ::_exit(status);
}

// A running simulation: its process, the read end of its pipe, what it wrote so far.
struct Child {
  pid_t pid = -1;
  int fd = -1;
  std::size_t job = 0;
  std::string data;
};

Child start_child(const Job& job, const SimOptions& options, std::size_t index) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("simulator: pipe: ") + std::strerror(errno));
  // Whatever the parent buffered must not be written a second time by the child.
  std::fflush(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]), ::close(fds[1]);
    throw std::runtime_error(std::string("simulator: fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    run_child(job, options, fds[1], parent);
  }
  ::close(fds[1]);
  return Child{pid, fds[0], index, {}};
}

// Reads what is ready; false at the end of the child's output.
bool read_some(Child& c) {
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(c.fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    c.data.append(chunk, static_cast<std::size_t>(n));
    return true;
  }
}

// Waits for the child that closed its pipe; its result, or why there is none.
SimOutcome finish_child(Child& c) {
  ::close(c.fd);
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  SimOutcome out;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    try {
      Reader rd(c.data);
      decode(rd, out.result);
      out.ok = true;
    } catch (const std::exception& e) {
      out.error = e.what();
    }
  } else if (WIFEXITED(status) && WEXITSTATUS(status) == 2 && !c.data.empty() && c.data[0] == 'E') {
    out.error = c.data.substr(1);
  } else if (WIFSIGNALED(status)) {
    out.error = "the simulation process was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
                ::strsignal(WTERMSIG(status)) + ")";
  } else {
    out.error = "the simulation process exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return out;
}

// The size gate (simulation_size.hpp), before any program is built: all ranks first, and
// only when they are too many, the ranks World's symmetry rules simulate.
void check_size(const Job& job, const SimOptions& options) {
  const double limit = simulation_memory_limit();
  const std::string hint = "simulate with symmetry (no --no-symmetry), fewer micro-batches or layers, or use "
                           "`partune estimate`";
  const SimulationSize all = simulation_size(job, job.world_size(), options.granularity, options.record_events);
  if (all.bytes <= limit && all.ranks <= kMaxSimulatedRanks) return;
  check_simulation_size(job, planned_simulation_size(job, options), limit, hint);
}

}  // namespace

SimulationSize planned_simulation_size(const Job& job, const SimOptions& options) {
  double ranks = job.world_size();
  if (ranks <= kMaxSimulatedRanks) {  // (beyond it the folding's walk over every rank is not made)
    const Folding f = simulation_folding(job, options);
    if (f.replica_block > 0) ranks = ranks * f.replica_block / job.data_context_degree();
    if (f.tensor) ranks /= job.parallel.tensor_parallel_degree;
  }
  return simulation_size(job, ranks, options.granularity, options.record_events);
}

std::vector<SimOutcome> simulate_each(const std::vector<Job>& jobs, const SimOptions& options, int workers,
                                      const std::function<void(std::size_t)>& on_done) {
  if (const int threads = thread_count(); threads > 1)
    throw std::logic_error("simulator: this process runs " + std::to_string(threads) +
                           " threads; simulations fork, so they must be started from a process that runs one");
  std::vector<SimOutcome> outcomes(jobs.size());
  std::vector<bool> refused(jobs.size(), false);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    try {
      check_size(jobs[i], options);
    } catch (const ScenarioError& e) {
      outcomes[i].error = e.what(), refused[i] = true;
    }
  }
  std::vector<Child> running;
  std::size_t next = 0, done = 0;
  const std::size_t limit = static_cast<std::size_t>(std::max(1, workers));
  while (next < jobs.size() || !running.empty()) {
    while (running.size() < limit && next < jobs.size()) {
      if (refused[next]) {
        ++next;
        if (on_done) on_done(++done);
        continue;
      }
      running.push_back(start_child(jobs[next], options, next));
      ++next;
    }
    if (running.empty()) break;
    std::vector<pollfd> fds;
    for (const Child& c : running) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("simulator: poll: ") + std::strerror(errno));
    }
    // Back to front, so that erasing a finished child keeps the others' indices.
    for (std::size_t i = running.size(); i-- > 0;) {
      if (fds[i].revents == 0 || read_some(running[i])) continue;
      outcomes[running[i].job] = finish_child(running[i]);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      if (on_done) on_done(++done);
    }
  }
  return outcomes;
}

SimResult simulate(const Job& job, const SimOptions& options) {
  check_size(job, options);  // ScenarioError: bad input, not a failed simulation
  SimOutcome out = std::move(simulate_each({job}, options, 1).front());
  if (!out.ok) throw std::runtime_error("simulator: " + out.error);
  return std::move(out.result);
}

}  // namespace partune::sim
