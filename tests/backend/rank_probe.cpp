// rank_probe: a stand-in for a `partune run` rank, for test_distributed_runtime. It does
// what a rank does around its training (read the launcher's environment, reach the
// rendezvous store, start the watchdog) and then behaves as told:
//
//   rank_probe [--pid-dir DIR] [--stale-ms N] [--interval-ms N] [--no-watchdog-rank R] MODE
//   MODE:  ok                   every rank says hello on stdout, finishes and exits 0
//          hang                 every rank sleeps (to be stopped from outside)
//          die R                rank R kills itself with SIGKILL; the others sleep
//          exit R STATUS        rank R exits with STATUS; the others sleep
//          supervise N GRACE MODE...   be the supervisor of N ranks running MODE...
//
// A rank that sleeps gives up after 60 s, saying it was never stopped. Every rank writes
// its pid to DIR/rank-<R>.pid (the tests check that none is left), then waits until all
// ranks have started their watchdogs.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "partune/backend/launcher.hpp"
#include "partune/backend/watchdog.hpp"

using namespace partune::backend;

namespace {

int usage(const std::string& why) {
  std::cerr << "rank_probe: " << why << "\n";
  return 2;
}

void sleep_then_give_up(int rank) {
  std::this_thread::sleep_for(std::chrono::seconds(60));
  std::cerr << "rank_probe: rank " << rank << " was never stopped\n";
  std::exit(0);
}

// Every rank adds itself under `key` and waits for the others (20 s at most).
void wait_for_all(c10d::TCPStore& store, const std::string& key, int world_size, int rank) {
  store.add(key, 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (store.add(key, 0) < world_size) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << "rank_probe: rank " << rank << ": not every rank reached " << key << "\n";
      std::exit(2);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string pid_dir;
  WatchdogOptions watch;
  int no_watchdog_rank = -1;
  std::size_t i = 0;
  for (; i < args.size() && args[i].rfind("--", 0) == 0; i += 2) {
    if (i + 1 >= args.size()) return usage(args[i] + " needs a value");
    if (args[i] == "--pid-dir") pid_dir = args[i + 1];
    else if (args[i] == "--stale-ms") watch.stale_after = std::chrono::milliseconds(std::stoi(args[i + 1]));
    else if (args[i] == "--interval-ms") watch.interval = std::chrono::milliseconds(std::stoi(args[i + 1]));
    else if (args[i] == "--no-watchdog-rank") no_watchdog_rank = std::stoi(args[i + 1]);
    else return usage("unknown option " + args[i]);
  }
  if (i >= args.size()) return usage("no mode");
  const std::string mode = args[i];

  if (mode == "supervise") {
    if (i + 3 >= args.size()) return usage("supervise N GRACE MODE...");
    const int nproc = std::stoi(args[i + 1]);
    SuperviseOptions options;
    options.grace_seconds = std::stoi(args[i + 2]);
    std::vector<std::string> rank_argv{current_executable_path()};
    for (std::size_t k = 0; k < i; ++k) rank_argv.push_back(args[k]);  // the options
    for (std::size_t k = i + 3; k < args.size(); ++k) rank_argv.push_back(args[k]);
    return supervise_local_ranks(rank_argv, nproc, options);
  }

  std::optional<RankEnvironment> found;
  try {
    found = rank_environment_from_env();
  } catch (const std::exception& e) {
    return usage(e.what());
  }
  if (!found) return usage("no RANK / WORLD_SIZE in the environment");
  const RankEnvironment env = *found;

  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(env.master_port);
  store_options.isServer = env.hosts_store();
  store_options.waitWorkers = false;
  store_options.timeout = std::chrono::seconds(20);
  c10d::TCPStore store(env.master_addr, store_options);

  std::unique_ptr<Watchdog> watchdog;
  if (env.rank != no_watchdog_rank) watchdog = std::make_unique<Watchdog>(env, watch);
  if (!pid_dir.empty()) std::ofstream(pid_dir + "/rank-" + std::to_string(env.rank) + ".pid") << ::getpid() << "\n";
  wait_for_all(store, "probe/ready", env.world_size, env.rank);

  if (mode == "ok") {
    std::cout << "rank " << env.rank << " says hello" << std::endl;
    if (watchdog) watchdog->finish();
    // The rank hosting the store leaves last: the others still talk to it until here.
    wait_for_all(store, "probe/finished", env.world_size, env.rank);
    return 0;
  }
  if (mode == "hang") sleep_then_give_up(env.rank);
  if (mode == "die" && i + 1 < args.size()) {
    // Past the barrier the others only add to a counter, and the dying rank dies once all
    // have: none is then polling the store when it goes (a poll in flight when the store's
    // host died made that rank fail on the poll, not by its watchdog, under load).
    const int dying = std::stoi(args[i + 1]);
    if (env.rank != dying) {
      store.add("probe/past-ready", 1);
      sleep_then_give_up(env.rank);
    }
    while (store.add("probe/past-ready", 0) < env.world_size - 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::raise(SIGKILL);
  }
  if (mode == "exit" && i + 2 < args.size()) {
    if (env.rank == std::stoi(args[i + 1])) std::_Exit(std::stoi(args[i + 2]));
    sleep_then_give_up(env.rank);
  }
  return usage("unknown mode " + mode);
}
