#pragma once
// The ranks of one c10d Gloo group as threads of this process, over one shared HashStore
// (a prefix per group): the harness of the tests of the backend's groups
// (test_tensor_parallel.cpp, test_expert_parallel.cpp). Include after LibTorch.
#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

namespace partune::test {

// Runs body(group, rank) on `degree` threads, one per rank of a fresh Gloo group named
// `name`-n, and returns their results in rank order. Assertions stay on the calling
// thread (Catch is not thread-safe): bodies only compute. A rank's exception is rethrown
// here. The groups outlive every body: a rank done first must not close its connections
// while a peer still reads the last message (Gloo: "Connection closed by peer").
template <typename Body>
auto run_gloo_ranks(const std::string& name, int degree, Body body)
    -> std::vector<decltype(body(c10::intrusive_ptr<c10d::ProcessGroupGloo>(), 0))> {
  static const c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::HashStore>();
  static std::atomic<int> groups{0};
  const std::string prefix = name + "-" + std::to_string(groups++);
  std::vector<decltype(body(c10::intrusive_ptr<c10d::ProcessGroupGloo>(), 0))> results(
      static_cast<std::size_t>(degree));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(degree));
  std::vector<c10::intrusive_ptr<c10d::ProcessGroupGloo>> alive(static_cast<std::size_t>(degree));
  std::vector<std::thread> threads;
  for (int r = 0; r < degree; ++r)
    threads.emplace_back([&, r] {
      try {
        auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(30));
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(prefix, store),
                                                                 r, degree, options);
        alive[static_cast<std::size_t>(r)] = group;
        results[static_cast<std::size_t>(r)] = body(group, r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return results;
}

}  // namespace partune::test
