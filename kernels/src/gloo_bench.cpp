// c10d Gloo over loopback between two processes, as `partune run --nproc 2` connects its
// ranks (communicators.cpp: a Gloo device on 127.0.0.1): all_reduce, all_gather and a
// send/recv ping-pong at each size. This process is rank 0 and records the times; a
// forked copy of it is rank 1. They meet through a c10d FileStore in a fresh temporary
// directory, so nothing listens on a port and nothing is left behind.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/torch.h>

#include "bench_internal.hpp"

namespace partune::kernels::detail {

namespace {

// Repetitions per timed batch: both ranks must make the same calls, so the count depends
// only on the size (about `budget` bytes per batch), never on a time one rank measured.
long repetitions(double bytes, bool quick) {
  const double budget = quick ? 2.0 * (1 << 20) : 32.0 * (1 << 20);
  return std::clamp(static_cast<long>(budget / bytes), 2L, quick ? 30L : 200L);
}

// Both ranks run this; rank 0 returns the measurements.
std::vector<TransferMeasurement> run_rank(int rank, const std::string& store_path, const std::vector<double>& sizes,
                                          bool quick, const std::function<void(const char*)>& tick) {
  auto store = c10::make_intrusive<c10d::FileStore>(store_path, 2);
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(120));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  c10d::ProcessGroupGloo group(store, rank, 2, options);
  const int peer = 1 - rank;

  std::vector<TransferMeasurement> out;
  for (double bytes : sizes) {
    if (tick && rank == 0) tick("Gloo collectives");
    const long elements = std::max(1L, static_cast<long>(bytes / 4));
    std::vector<at::Tensor> buffer{torch::ones({elements})};
    // all_gather's size is its output (the cost model's convention): each rank gives half.
    std::vector<at::Tensor> half{torch::ones({std::max(1L, elements / 2)})};
    std::vector<std::vector<at::Tensor>> gathered{{torch::empty_like(half[0]), torch::empty_like(half[0])}};
    const long reps = repetitions(bytes, quick);
    // The mean of per-call times: a training step pays every call, including those that
    // waited for a descheduled peer or for Gloo's worker-thread hand-off; a median would
    // describe a transport the step never sees (here it hid a ~1 ms per-call cost).
    auto timed = [&](const std::function<void()>& op) {
      op();  // warm-up; also lines the two ranks up
      const long calls = 3 * reps;
      const auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < calls; ++i) op();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(calls);
    };
    const double all_reduce = timed([&] { group.allreduce(buffer)->wait(); });
    const double all_gather = timed([&] { group.allgather(gathered, half)->wait(); });
    const double round_trip = timed([&] {
      if (rank == 0) {
        group.send(buffer, peer, 0)->wait();
        group.recv(buffer, peer, 0)->wait();
      } else {
        group.recv(buffer, peer, 0)->wait();
        group.send(buffer, peer, 0)->wait();
      }
    });
    const double actual = 4.0 * static_cast<double>(elements);
    out.push_back({"all_reduce", actual, all_reduce});
    out.push_back({"all_gather", 8.0 * static_cast<double>(half[0].numel()), all_gather});
    out.push_back({"send_recv", actual, round_trip / 2});
  }
  return out;
}

}  // namespace

std::vector<TransferMeasurement> bench_gloo(const std::vector<double>& sizes, bool quick,
                                            const std::function<void(const char*)>& tick) {
  char dir_template[] = "/tmp/partune-calibrate-XXXXXX";
  if (!::mkdtemp(dir_template)) throw std::runtime_error("Gloo benchmark: cannot create a temporary directory in /tmp");
  const std::string dir = dir_template;
  const std::string store_path = dir + "/store";
  std::fflush(nullptr);  // the peer must not flush this process's buffered output again
  const pid_t peer = ::fork();
  if (peer < 0) {
    std::filesystem::remove_all(dir);
    throw std::runtime_error("Gloo benchmark: cannot fork the second rank");
  }
  if (peer == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the calibration
    int status = 0;
    try {
      run_rank(1, store_path, sizes, quick, {});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "partune calibrate: Gloo peer rank: %s\n", e.what());
      status = 1;
    }
    std::fflush(stderr);
    ::_exit(status);
  }
  std::vector<TransferMeasurement> out;
  try {
    out = run_rank(0, store_path, sizes, quick, tick);
  } catch (const std::exception& e) {
    ::kill(peer, SIGKILL);
    ::waitpid(peer, nullptr, 0);
    std::filesystem::remove_all(dir);
    throw std::runtime_error(std::string("Gloo benchmark over loopback failed: ") + e.what());
  }
  int status = 0;
  ::waitpid(peer, &status, 0);
  std::filesystem::remove_all(dir);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("Gloo benchmark: the peer rank (pid " + std::to_string(peer) + ") failed");
  return out;
}

}  // namespace partune::kernels::detail
