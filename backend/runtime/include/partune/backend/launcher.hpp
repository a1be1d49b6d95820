#pragma once
// One process per rank: where a rank learns who it is (the launcher's environment), how
// many intra-op threads it gets, and the local supervisor behind `partune run --nproc N`.
// No LibTorch in this header: the CLI includes it without compiling LibTorch headers.
//
// Two ways to start the ranks, one environment:
//  - `partune run JOB --nproc N` forks N copies of itself (supervise_local_ranks). The
//    rendezvous store (a c10d TCPStore) lives in the supervisor, so a rank that dies takes
//    nothing down with it, and the supervisor tells the others (store key partune/failed);
//    it also reads the ranks' heartbeats, so that a rank that hangs is named too.
//  - an external launcher (torchrun, a batch system) sets the same variables; then rank 0
//    hosts the store, as torchrun's ranks do, and the ranks watch each other's heartbeats
//    (watchdog.hpp).
#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace partune::backend {

// What a rank reads from its environment (the variables torchrun sets).
struct RankEnvironment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes on this machine
  int local_world_size = 1;  // processes on this machine
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // the rendezvous store's port; 0 only when world_size is 1
  // PARTUNE_STORE_HOSTED=1: the supervisor hosts the store and watches the ranks (no rank
  // hosts it, and the ranks need not compare heartbeats: the supervisor sees a death
  // directly and compares the heartbeats itself).
  bool store_hosted_by_launcher = false;
  // How long a rank waits to join the rendezvous (reach the store, and, on the rank that
  // hosts it, hear from every other rank) before it gives up naming the cause:
  // PARTUNE_RENDEZVOUS_TIMEOUT_S, 1 to 3600, default 60.
  int rendezvous_timeout_s = 60;

  // Whether this rank starts the store server: rank 0, unless the launcher hosts it.
  bool hosts_store() const { return !store_hosted_by_launcher && rank == 0; }
  // "the launcher" / "rank 0": who to name when the store is lost.
  std::string store_host_description() const;
};

// The rank's environment: RANK, WORLD_SIZE, LOCAL_RANK (default: RANK), LOCAL_WORLD_SIZE
// (default: WORLD_SIZE), MASTER_ADDR (default 127.0.0.1), MASTER_PORT (required when
// WORLD_SIZE > 1), PARTUNE_STORE_HOSTED (1 or 0) and PARTUNE_RENDEZVOUS_TIMEOUT_S. nullopt when neither RANK nor
// WORLD_SIZE is set (a plain single-process run). Throws std::runtime_error naming the
// variable and what is wrong with it ("RANK=5 is not below WORLD_SIZE=4") for a partial or
// invalid environment.
std::optional<RankEnvironment> rank_environment_from_env();

// LibTorch intra-op threads for one of `local_world_size` ranks on this machine: the cores
// this process may run on (its CPU affinity, else std::thread::hardware_concurrency) shared
// evenly, at least 1. Oversubscribing the cores makes every rank slower than one thread.
int default_threads(int local_world_size);

// The path of the running executable (/proc/self/exe resolved), for re-executing it as the
// ranks. Throws std::runtime_error when it cannot be read.
std::string current_executable_path();

// This process's own arguments (/proc/self/cmdline), argv[0] first: what the ranks of a
// local supervisor are started with.
std::vector<std::string> current_arguments();

// The store key under which whoever hosts the rendezvous store (the supervisor, or rank 0)
// writes the world size it was started with; every rank compares its own WORLD_SIZE.
const char* rendezvous_world_size_key();

struct SuperviseOptions {
  // After the first rank fails, how long the others get to notice (their watchdogs read
  // partune/failed within half a second) and exit before they are killed. 20 s keeps a
  // failed run, detection included, under 30 s.
  int grace_seconds = 20;
  // A running rank whose heartbeat (its watchdog's counter in the store, watchdog.hpp) has
  // not moved for this long and that has not finished is hung: the supervisor names it
  // ("rank 1 (pid 1234) sent no heartbeat for 10 s"), kills it and stops the others as for
  // a death. 10 s, the watchdog's stale time; 0 turns the check off.
  std::chrono::milliseconds silent_after{10000};
  // Ranks > 0 write their stdout to /dev/null unless this is set (rank 0 prints the
  // report). Stderr of every rank always passes through.
  bool all_ranks_stdout = false;
  // The program executed for every rank; empty: rank_argv[0]. Lets argv[0] stay the name
  // the user typed (for help and error messages) while the file run is this executable.
  std::string executable;
  // Prefix of the supervisor's own messages on stderr.
  std::string message_prefix = "partune run";
};

// Runs `nproc` ranks of `rank_argv` on this machine and waits for them. Hosts the
// rendezvous store (a c10d TCPStore on 127.0.0.1, ephemeral port), then starts every rank
// with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
// PARTUNE_STORE_HOSTED=1 in its environment (the rest of the environment is inherited). A
// rank dies with the supervisor (PR_SET_PDEATHSIG), so nothing is left behind if the
// supervisor is killed.
//
// When a rank exits non-zero or is killed by a signal, the supervisor prints why on stderr
// ("partune run: rank 2 (pid 1234) was killed by signal 9; stopping the other ranks"),
// writes the same reason under partune/failed for the other ranks' watchdogs, gives them
// grace_seconds to stop and kills what is left. A rank that hangs instead (its process
// stopped: SIGSTOP, a debugger, frozen) is caught by its silent heartbeat after
// silent_after, SIGKILLed and named the same way; its peers, blocked in a collective with
// it but beating, are not blamed. (A rank whose training thread alone is stuck still
// beats: Gloo's collective timeout ends that one.)
// SIGINT and SIGTERM to the supervisor are passed on to the ranks (the same grace applies).
//
// Returns 0 when every rank exited 0; otherwise the first failed rank's exit status, 1 if
// it was killed by a signal or went silent, or 128 + the signal when the supervisor was
// interrupted.
// Throws std::invalid_argument for nproc < 1 or an empty rank_argv, std::runtime_error
// when the executable cannot be run or the store cannot start (before any rank starts).
// The calling thread must live until it returns (a rank's PR_SET_PDEATHSIG follows the
// thread that forked it), and it must be the only caller at a time.
int supervise_local_ranks(const std::vector<std::string>& rank_argv, int nproc, const SuperviseOptions& options = {});

}  // namespace partune::backend
