// The search's robustness: a candidate whose simulation fails is ruled out with its
// reason and the search goes on; the winner fits by the simulator's own memory verdict;
// simulation processes are forked from a process that runs no other thread, and die with
// it.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/search/space.hpp"
#include "partune/search/tuner.hpp"
#include "partune/sim/simulator.hpp"
using namespace partune;
using namespace partune::search;

namespace {

const std::vector<std::string> kTwoByTwo = {
    "pipeline_parallel_degree=1,2", "tensor_parallel_degree=1,2", "sharded_data_parallel_degree=1",
    "placement_strategy=cluster",   "activation_checkpointing=none", "offload_activations=false",
    "shard_optimizer_state=false",  "flash_attention=true",          "sequence_parallel=false"};

SearchSpace restricted(const std::vector<std::string>& fixes) {
  SearchSpace s;
  for (const auto& f : fixes) restrict_space(s, f);
  return s;
}

SearchOptions simulating(int top_k) {
  SearchOptions o;
  o.top_k = top_k;
  o.workers = 2;
  o.auto_partition = false;
  o.memory_headroom = 0;  // the HBM verdicts alone (the headroom's own case is below)
  return o;
}

}  // namespace

TEST_CASE("a failed simulation rules out its candidate, not the search", "[search][robustness]") {
  const Job base = testing::p4d_job("gpt2-small", 1, 16);
  const SearchSpace space = restricted(kTwoByTwo);
  const SearchReport clean = run_search(base, space, simulating(4));
  REQUIRE(clean.ranked.size() >= 2);
  REQUIRE(clean.ranked[1].simulated);
  CHECK(clean.rejected.empty());
  const std::string winner = describe(clean.ranked[0].job), runner_up = describe(clean.ranked[1].job);
  INFO("winner " << winner << ", runner-up " << runner_up);

  SECTION("the winner's simulation process is killed (as the OOM killer would)") {
    SearchOptions o = simulating(4);
    o.in_simulation_child = [&](const Job& j) {
      if (describe(j) == winner) ::kill(::getpid(), SIGKILL);
    };
    const SearchReport r = run_search(base, space, o);
    REQUIRE(r.rejected.size() == 1);
    CHECK(describe(r.rejected[0].job) == winner);
    CHECK_FALSE(r.rejected[0].simulated);
    CHECK_THAT(r.rejected[0].rejection, Catch::Contains("simulation failed") && Catch::Contains("signal 9"));
    CHECK(r.simulation_failures == 1);
    // The runner-up wins, with the figures it had before.
    REQUIRE(!r.ranked.empty());
    CHECK(r.ranked[0].simulated);
    CHECK(describe(r.ranked[0].job) == runner_up);
    CHECK(r.ranked[0].simulation.step_time == clean.ranked[1].simulation.step_time);
    CHECK(r.ranked.size() + 1 == clean.ranked.size());
  }
  SECTION("the simulator refuses the winner (throws)") {
    SearchOptions o = simulating(4);
    o.in_simulation_child = [&](const Job& j) {
      if (describe(j) == winner) throw std::runtime_error("injected refusal");
    };
    const SearchReport r = run_search(base, space, o);
    REQUIRE(r.rejected.size() == 1);
    CHECK_THAT(r.rejected[0].rejection, Catch::Contains("injected refusal"));
    REQUIRE(!r.ranked.empty());
    CHECK(describe(r.ranked[0].job) == runner_up);
  }
  SECTION("every simulation fails: the search still ends, each candidate ruled out with its reason") {
    SearchOptions o = simulating(2);
    o.in_simulation_child = [](const Job&) { throw std::runtime_error("injected refusal"); };
    const SearchReport r = run_search(base, space, o);
    // Batch after batch of two until every kept candidate has been tried.
    CHECK(r.ranked.empty());
    CHECK(r.rejected.size() == std::min<std::size_t>(8, clean.ranked.size() + clean.rejected.size()));
    CHECK(r.simulation_failures == static_cast<long>(r.rejected.size()));
    CHECK(r.simulated == static_cast<long>(r.rejected.size()));
  }
}

TEST_CASE("simulations are never forked from a process that runs other threads", "[search][robustness]") {
  const Job job = testing::p4d_job("gpt2-small", 1, 8);
  std::mutex m;
  std::condition_variable cv;
  bool stop = false;
  std::thread other([&] {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return stop; });
  });
  CHECK_THROWS_AS(sim::simulate_each({job}, {}, 1), std::logic_error);
  CHECK_THROWS_AS(sim::simulate(job), std::logic_error);
  {
    std::lock_guard<std::mutex> lock(m);
    stop = true;
  }
  cv.notify_one();
  other.join();
  // Alone again: the same simulation runs.
  CHECK(sim::simulate_each({job}, {}, 1).front().ok);
}

TEST_CASE("a simulation process dies with the process that started it", "[search][robustness]") {
  const Job job = testing::p4d_job("gpt2-small", 1, 8);
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t parent = ::fork();
  REQUIRE(parent >= 0);
  if (parent == 0) {
    // The parent of the simulation: its child reports its pid, then hangs.
    ::close(fds[0]);
    sim::SimOptions so;
    so.in_child = [&](const Job&) {
      const pid_t me = ::getpid();
      if (::write(fds[1], &me, sizeof me) != sizeof me) ::_exit(5);
      ::pause();
    };
    try {
      sim::simulate_each({job}, so, 1);
    } catch (...) {
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  pid_t child = 0;
  REQUIRE(::read(fds[0], &child, sizeof child) == sizeof child);
  ::close(fds[0]);
  ::kill(parent, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(parent, &status, 0) == parent);
  // The orphan is killed (PR_SET_PDEATHSIG) and reaped by whoever adopts it.
  auto alive = [&] {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string pid, name, state;
    return stat >> pid >> name >> state && state != "Z" && state != "X";
  };
  for (int i = 0; i < 200 && alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(alive());
  if (alive()) ::kill(child, SIGKILL);
}

// gpt2-medium on two p4d (pp 2 x tp 8, 16 micro-batches of 2, full checkpointing with
// offloaded activations): checkpointing 6 layers of each stage's 12 is faster by the
// estimator than checkpointing all of them; with offloading, the simulated timeline
// peaks above the estimator's peak (activations reloaded ahead of backward overlap).
// With HBM between the two peaks, the estimator says the faster one fits and the
// simulator says it does not: the slower one, which fits by both, must win.
TEST_CASE("the winner fits by the simulator's own memory verdict", "[search][robustness]") {
  Job base = testing::p4d_job("gpt2-medium", 2, 32);
  const SearchSpace space = restricted(
      {"pipeline_parallel_degree=2", "tensor_parallel_degree=8", "sharded_data_parallel_degree=1",
       "placement_strategy=cluster", "microbatch_size=2", "pipeline=interleaved", "virtual_stages=1",
       "activation_checkpointing=full", "checkpointed_layers=all,6", "offload_activations=true",
       "shard_optimizer_state=false", "flash_attention=true", "sequence_parallel=false"});
  std::vector<Job> jobs;
  enumerate(base, space, [&](const Point& p) { jobs.push_back(make_job(base, p)); });
  REQUIRE(jobs.size() == 2);
  if (jobs[0].parallel.checkpointed_layers != 6) std::swap(jobs[0], jobs[1]);
  const Job& partial = jobs[0];  // 6 of 12 layers checkpointed
  const Job& all = jobs[1];
  const Estimate ep = estimate(partial), ea = estimate(all);
  const std::vector<sim::SimOutcome> simulated = sim::simulate_each(jobs, {}, 2);
  REQUIRE((simulated[0].ok && simulated[1].ok));
  auto simulated_peak = [](const sim::SimResult& r) {
    double peak = 0;
    for (const sim::RankResult& rank : r.ranks) peak = std::max(peak, rank.peak_memory);
    return peak;
  };
  const double sp = simulated_peak(simulated[0].result), sa = simulated_peak(simulated[1].result);
  INFO("partial: estimated " << ep.memory.total() << " B, simulated " << sp << " B, " << ep.step_time
                             << " s; all: estimated " << ea.memory.total() << " B, simulated " << sa << " B, "
                             << ea.step_time << " s");
  REQUIRE(sp > ep.memory.total());            // the simulator's peak is the higher one
  REQUIRE(ep.step_time < ea.step_time);       // the estimator prefers the partial one
  const double hbm = (ep.memory.total() + sp) / 2;
  REQUIRE(std::max(ea.memory.total(), sa) < hbm);  // the other fits by both

  base.cluster.instance.gpu.hbm_bytes = hbm;
  SearchOptions o = simulating(1);  // the estimator's best alone first
  const SearchReport r = run_search(base, space, o);
  REQUIRE(r.rejected.size() == 1);
  CHECK(r.rejected[0].job.parallel.checkpointed_layers == 6);
  CHECK(r.rejected[0].estimate.fits);
  CHECK(r.rejected[0].simulated);
  CHECK_FALSE(r.rejected[0].simulation.fits);
  CHECK_THAT(r.rejected[0].rejection, Catch::Contains("does not fit by the simulator"));
  CHECK(r.simulated_too_large == 1);
  REQUIRE(r.ranked.size() == 1);  // the next candidate was simulated because the first failed
  CHECK(r.ranked[0].job.parallel.checkpointed_layers == -1);
  CHECK(r.ranked[0].simulated);
  CHECK(r.ranked[0].simulation.fits);
  CHECK(r.simulated == 2);

  // With a 10% headroom and 90% of the HBM between the peaks, the simulator's peak leaves
  // less than the headroom: the same candidate is ruled out, saying so.
  base.cluster.instance.gpu.hbm_bytes = hbm / 0.9;
  o.memory_headroom = 0.10;
  const SearchReport h = run_search(base, space, o);
  REQUIRE(h.rejected.size() == 1);
  CHECK(h.rejected[0].job.parallel.checkpointed_layers == 6);
  CHECK(h.rejected[0].simulation.fits);  // it fits the HBM, not the headroom
  CHECK_THAT(h.rejected[0].rejection, Catch::Contains("10% headroom"));
  REQUIRE(h.ranked.size() == 1);
  CHECK(h.ranked[0].job.parallel.checkpointed_layers == -1);
}
