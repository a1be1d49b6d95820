// The rank watchdog (watchdog.hpp).
#include "partune/backend/watchdog.hpp"

#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace partune::backend {

namespace {

std::vector<std::uint8_t> bytes(const std::string& s) { return std::vector<std::uint8_t>(s.begin(), s.end()); }

// "10 s", "1.5 s".
std::string seconds_text(std::chrono::milliseconds d) { return fmt::format("{:g} s", d.count() / 1000.0); }

}  // namespace

std::string Watchdog::heartbeat_key(int rank) { return fmt::format("partune/heartbeat/{}", rank); }
std::string Watchdog::done_key(int rank) { return fmt::format("partune/done/{}", rank); }
const char* Watchdog::failed_key() { return "partune/failed"; }

Watchdog::Watchdog(const RankEnvironment& env, const WatchdogOptions& options) : env_(env), options_(options) {
  if (options_.interval.count() <= 0) throw std::invalid_argument("watchdog: the interval must be positive");
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = false;
  store_options.waitWorkers = false;
  store_options.timeout = options.connect_timeout;
  try {
    store_ = std::make_unique<c10d::TCPStore>(env.master_addr, store_options);
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format("rank {}: the watchdog cannot reach the rendezvous store at {}:{} (hosted by {}): {}",
                                         env.rank, env.master_addr, env.master_port, env.store_host_description(),
                                         e.what()));
  }
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() { stop_thread(); }

void Watchdog::stop_thread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::finish() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) return;
    finished_ = true;
  }
  stop_thread();
  // A store that is gone by now (its host finished first) changes nothing: this rank is
  // done.
  std::lock_guard<std::mutex> store_lock(store_mutex_);
  try {
    store_->set(done_key(env_.rank), bytes("1"));
    // A TCPStore set is not acknowledged; a round trip on the same connection makes sure
    // the store has it before this rank moves on (to a final barrier, say).
    store_->check({done_key(env_.rank)});
  } catch (const std::exception&) {
  }
}

void Watchdog::report_failure(const std::string& why) {
  std::lock_guard<std::mutex> store_lock(store_mutex_);  // the thread uses the connection too
  try {
    if (!store_->check({failed_key()})) {
      store_->set(failed_key(), bytes(why));
      store_->check({failed_key()});  // acknowledged before the caller exits (see finish)
    }
  } catch (const std::exception&) {
  }
}

long long Watchdog::heartbeats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return heartbeats_;
}

void Watchdog::stop_rank(const std::string& why) {
  // write(2), not stdio: the main thread may hold a stdio lock while blocked.
  const std::string line = fmt::format("{}: rank {}: stopping: {}\n", options_.message_prefix, env_.rank, why);
  for (std::size_t done = 0; done < line.size();) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  std::_Exit(1);
}

void Watchdog::tick(std::vector<long long>& last_seen, std::vector<std::chrono::steady_clock::time_point>& last_change,
                    std::vector<bool>& finished) {
  if (store_->check({failed_key()})) {
    const auto v = store_->get(failed_key());
    stop_rank(std::string(v.begin(), v.end()));
  }
  store_->add(heartbeat_key(env_.rank), 1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++heartbeats_;
  }
  // With a launcher hosting the store, the launcher sees a death at once (waitpid), reads
  // the heartbeats itself (a hung rank) and writes partune/failed; comparing them here too
  // would only add load on the store.
  if (env_.store_hosted_by_launcher) return;
  const auto now = std::chrono::steady_clock::now();
  for (int peer = 0; peer < env_.world_size; ++peer) {
    const auto p = static_cast<std::size_t>(peer);
    if (peer == env_.rank || finished[p]) continue;
    const long long beat = store_->add(heartbeat_key(peer), 0);  // add 0: reads without blocking
    if (beat != last_seen[p]) {
      last_seen[p] = beat;
      last_change[p] = now;
      continue;
    }
    if (now - last_change[p] < options_.stale_after) continue;
    if (store_->check({done_key(peer)})) {
      finished[p] = true;
      continue;
    }
    const std::string why = fmt::format("rank {} sent no heartbeat for {}", peer, seconds_text(options_.stale_after));
    // Tell the others at once rather than let each wait out stale_after. The first
    // watchdog to notice names the cause; the others keep it.
    if (!store_->check({failed_key()})) {
      store_->set(failed_key(), bytes(why));
      store_->check({failed_key()});  // acknowledged before this process ends (see finish)
    }
    stop_rank(why);
  }
}

void Watchdog::run() {
  const std::size_t n = static_cast<std::size_t>(env_.world_size);
  std::vector<long long> last_seen(n, -1);
  std::vector<std::chrono::steady_clock::time_point> last_change(n, std::chrono::steady_clock::now());
  std::vector<bool> finished(n, false);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    try {
      std::lock_guard<std::mutex> store_lock(store_mutex_);
      tick(last_seen, last_change, finished);
    } catch (const std::exception&) {
      lock.lock();
      if (stopping_) return;  // finishing: the store may close under us
      lock.unlock();
      stop_rank(fmt::format("lost the rendezvous store at {}:{} (hosted by {})", env_.master_addr, env_.master_port,
                            env_.store_host_description()));
    }
    lock.lock();
    wake_.wait_for(lock, options_.interval, [this] { return stopping_; });
  }
}

}  // namespace partune::backend
