#pragma once
// Every rank's guard against a dead peer: a collective with a dead peer otherwise blocks
// until Gloo's timeout (minutes). Started by every rank after the rendezvous; a thread on
// its own store connection that, every interval:
//  (a) increments partune/heartbeat/<rank>;
//  (b) stops the rank when partune/failed is set (the supervisor, or a peer's watchdog,
//      wrote why);
//  (c) when no launcher hosts the store (torchrun and the like, where nobody sees a
//      death directly), stops the rank when a peer's heartbeat has not moved for
//      stale_after and the peer did not finish ("rank 3 sent no heartbeat for 10 s"),
//      and writes that under partune/failed for the others (with `partune run --nproc`
//      the supervisor compares the heartbeats instead, launcher.hpp);
//  (d) stops the rank when the store cannot be reached, naming who hosts it.
// Stopping prints "partune run: rank R: stopping: <why>" on stderr and ends the process
// with std::_Exit(1) from the watchdog's thread: the main thread may be blocked inside a
// collective, and unwinding or exit handlers could block as well.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "partune/backend/launcher.hpp"

namespace c10d {
class TCPStore;
}

namespace partune::backend {

struct WatchdogOptions {
  std::chrono::milliseconds interval{500};
  std::chrono::milliseconds stale_after{10000};
  // How long the store connection may take to open (the store exists already: the
  // rendezvous is done).
  std::chrono::milliseconds connect_timeout{30000};
  std::string message_prefix = "partune run";
};

class Watchdog {
 public:
  // Connects to the store at env.master_addr:env.master_port and starts the thread.
  // Throws std::runtime_error when the store cannot be reached.
  explicit Watchdog(const RankEnvironment& env, const WatchdogOptions& options = {});
  // Stops and joins the thread. Without finish() the rank is not marked done: a rank that
  // unwinds on an error looks dead to its peers, as it should.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // This rank is done: sets partune/done/<rank> (a finished peer is not a dead one) and
  // stops the thread. Idempotent.
  void finish();

  // This rank failed (an exception at the top of the rank, say): writes `why` under
  // partune/failed unless a cause is there already, so that the peers stop within an
  // interval instead of blocking in a collective; the caller then exits non-zero. Does
  // not throw (the store may be what failed).
  void report_failure(const std::string& why);

  // Heartbeats sent so far (for tests and diagnostics).
  long long heartbeats() const;

  // The store keys, shared with the supervisor and the tests.
  static std::string heartbeat_key(int rank);
  static std::string done_key(int rank);
  static const char* failed_key();

 private:
  void run();
  void stop_thread();
  [[noreturn]] void stop_rank(const std::string& why);
  // One round of (b), (a), (c); throws when the store cannot be reached.
  void tick(std::vector<long long>& last_seen, std::vector<std::chrono::steady_clock::time_point>& last_change,
            std::vector<bool>& finished);

  RankEnvironment env_;
  WatchdogOptions options_;
  std::unique_ptr<c10d::TCPStore> store_;
  std::mutex store_mutex_;  // one operation at a time on the connection (thread, report_failure)
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // the thread is asked to end
  bool finished_ = false;  // finish() ran
  long long heartbeats_ = 0;
  std::thread thread_;
};

}  // namespace partune::backend
