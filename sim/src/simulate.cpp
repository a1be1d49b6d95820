// simulate(): runs World in a forked child (SimGrid keeps one engine per process) and
// brings the result back over a pipe in a flat binary form.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

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

void encode(Writer& w, const SimResult& r) {
  const Estimate& e = r.metrics;
  w.put(e.step_time), w.put(e.samples_per_s), w.put(e.tokens_per_s), w.put(e.model_flops);
  w.put(e.hardware_flops), w.put(e.tflops_per_gpu), w.put(e.hw_tflops_per_gpu), w.put(e.mfu);
  w.put(e.breakdown), w.put(e.memory), w.put(e.memory_capacity), w.put(e.fits), w.put(e.not_fit_reason);
  w.put_vector(r.stage_utilisation);
  w.put(r.bubble_fraction), w.put(r.exposed);
  w.put_vector(r.ranks);
  w.put_vector(r.events);
  w.put(r.symmetric), w.put(r.activities), w.put(r.wall_seconds);
}

void decode(Reader& rd, SimResult& r) {
  Estimate& e = r.metrics;
  rd.get(e.step_time), rd.get(e.samples_per_s), rd.get(e.tokens_per_s), rd.get(e.model_flops);
  rd.get(e.hardware_flops), rd.get(e.tflops_per_gpu), rd.get(e.hw_tflops_per_gpu), rd.get(e.mfu);
  rd.get(e.breakdown), rd.get(e.memory), rd.get(e.memory_capacity), rd.get(e.fits), rd.get(e.not_fit_reason);
  rd.get_vector(r.stage_utilisation);
  rd.get(r.bubble_fraction), rd.get(r.exposed);
  rd.get_vector(r.ranks);
  rd.get_vector(r.events);
  rd.get(r.symmetric), rd.get(r.activities), rd.get(r.wall_seconds);
}

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

}  // namespace

SimResult simulate(const Job& job, const SimOptions& options) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("simulator: pipe: ") + std::strerror(errno));
  // Whatever the parent buffered must not be written a second time by the child.
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("simulator: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    int status = 0;
    try {
      World world(job, options);
      const SimResult r = world.run();
      Writer w;
      encode(w, r);
      status = write_all(fds[1], w.bytes()) ? 0 : 3;
    } catch (const std::exception& e) {
      const std::string msg = std::string("E") + e.what();
      write_all(fds[1], msg);
      status = 2;
    }
    ::close(fds[1]);
    ::_exit(status);
  }
  ::close(fds[1]);
  std::string data;
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(chunk, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2 && !data.empty() && data[0] == 'E')
      throw std::runtime_error("simulator: " + data.substr(1));
    throw std::runtime_error("simulator: the simulation process failed (status " + std::to_string(status) + ")");
  }
  SimResult r;
  Reader rd(data);
  decode(rd, r);
  return r;
}

}  // namespace partune::sim
