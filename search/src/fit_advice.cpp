// The closest candidates when none fits, and the changes that make them fit (fit_advice.hpp).
#include "partune/search/fit_advice.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/units.hpp"

namespace partune::search {

namespace {

// A change to a candidate: its words, its --set form, and what it does to the job.
struct Change {
  std::string key, set;
  std::function<void(Job&)> apply;
};

// The changes the search does not make by itself that could shrink `job`'s peak: the
// opt-in state knobs (tried only when the job or --fix asks: a job file's `true` now adds
// them to the space) and more nodes (the data-parallel degree grows, micro-batches keep
// their size where the batch allows).
std::vector<Change> state_changes(const Job& job) {
  const ParallelConfig& pc = job.parallel;
  std::vector<Change> out;
  const int dp = job.data_context_degree();
  if (dp > 1 && pc.sharded_data_parallel_degree == 1 && pc.shard_optimizer_state && !pc.shard_gradients)
    out.push_back({"parallel.shard_gradients: true", "shard_gradients=true",
                   [](Job& j) { j.parallel.shard_gradients = true; }});
  if (!pc.offload_optimizer && job.cluster.instance.host_memory_bw > 0)
    out.push_back({"parallel.offload_optimizer: true", "offload_optimizer=true",
                   [](Job& j) { j.parallel.offload_optimizer = true; }});
  if (pc.sharded_data_parallel_degree > 1 && !pc.offload_parameters && job.cluster.instance.host_memory_bw > 0)
    out.push_back({"parallel.offload_optimizer: true and parallel.offload_parameters: true",
                   "offload_optimizer=true --set offload_parameters=true", [](Job& j) {
                     j.parallel.offload_optimizer = true;
                     j.parallel.offload_parameters = true;
                   }});
  return out;
}

std::vector<Change> node_changes(const Job& job) {
  std::vector<Change> out;
  for (int factor : {2, 4, 8, 16}) {
    const int nodes = job.cluster.nodes * factor;
    out.push_back({fmt::format("cluster.nodes: {}", nodes), fmt::format("nodes={}", nodes),
                   [factor](Job& j) {
                     j.cluster.nodes *= factor;
                     // More data-parallel ranks to shard over: the search tries ZeRO-1 by itself.
                     if (j.parallel.sharded_data_parallel_degree == 1) j.parallel.shard_optimizer_state = true;
                     // Keep each micro-batch's sequences: fewer micro-batches a replica where they divide.
                     if (j.parallel.microbatches % factor == 0) j.parallel.microbatches /= factor;
                   }});
  }
  return out;
}

// The candidate with `changes` applied, estimated; false where the job rules refuse it.
bool try_changes(const Job& job, const std::vector<const Change*>& changes, double limit, FitChange& out) {
  Job alt = job;
  for (const Change* c : changes) c->apply(alt);
  if (check_job(alt)) return false;
  const Estimate e = estimate(alt);
  out.peak_bytes = e.memory.total();
  out.step_time = e.step_time;
  return e.fits && out.peak_bytes <= limit;
}

FitChange joined(const std::vector<const Change*>& changes, const FitChange& measured) {
  FitChange f = measured;
  for (const Change* c : changes) {
    f.keys += (f.keys.empty() ? "" : " and ") + c->key;
    if (!c->set.empty()) f.set += (f.set.empty() ? "" : " --set ") + c->set;
  }
  return f;
}

void advise(ClosestMiss& miss, double limit, double headroom) {
  const Job& job = miss.job;
  std::vector<Change> changes = state_changes(job);
  const std::size_t state_count = changes.size();
  for (Change& c : node_changes(job)) changes.push_back(std::move(c));
  // One change alone: each that fits, fastest first; of the node counts only the smallest.
  std::vector<FitChange> alone;
  bool nodes_fit = false;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    if (i >= state_count && nodes_fit) break;
    FitChange f;
    if (!try_changes(job, {&changes[i]}, limit, f)) continue;
    alone.push_back(joined({&changes[i]}, f));
    nodes_fit = nodes_fit || i >= state_count;
  }
  // A smaller headroom, where the candidate fits in the HBM itself.
  const double hbm = job.cluster.instance.gpu.hbm_bytes;
  if (headroom > 0 && miss.peak_bytes <= hbm) {
    const double free_share = std::floor(100.0 * (hbm - miss.peak_bytes) / hbm) / 100.0;
    FitChange f;
    f.option = fmt::format("--memory-headroom {:.2f}", free_share);
    f.peak_bytes = miss.peak_bytes;
    f.step_time = estimate(job).step_time;
    alone.push_back(f);
  }
  std::stable_sort(alone.begin(), alone.end(),
                   [](const FitChange& a, const FitChange& b) { return a.step_time < b.step_time; });
  if (alone.size() > 2) alone.resize(2);
  if (!alone.empty()) {
    miss.changes = std::move(alone);
    return;
  }
  // No one change: a state change with more nodes, the fastest pair that fits.
  FitChange best;
  bool found = false;
  for (std::size_t i = 0; i < state_count; ++i)
    for (std::size_t n = state_count; n < changes.size(); ++n) {
      FitChange f;
      if (!try_changes(job, {&changes[i], &changes[n]}, limit, f)) continue;
      if (!found || f.step_time < best.step_time) best = joined({&changes[i], &changes[n]}, f);
      found = true;
      break;  // the smallest node count that fits with this state change
    }
  if (found) {
    miss.changes.push_back(best);
    miss.together = true;
  }
}

}  // namespace

std::vector<ClosestMiss> closest_misses(const SearchReport& report, const Job& base, std::size_t groups) {
  using Layout = std::tuple<int, int, int, int, int>;
  struct Group {
    const Pruned* best = nullptr;
    long count = 0;
  };
  std::map<Layout, Group> layouts;
  for (const Pruned& p : report.pruned) {
    if (p.stage != Pruned::Stage::memory) continue;
    Group& g = layouts[{p.point.pipeline, p.point.tensor, p.point.context, p.point.expert, p.point.sharded}];
    ++g.count;
    if (!g.best || p.peak_bytes < g.best->peak_bytes) g.best = &p;
  }
  std::vector<const Group*> order;
  for (const auto& [layout, g] : layouts) order.push_back(&g);
  std::stable_sort(order.begin(), order.end(),
                   [](const Group* a, const Group* b) { return a->best->peak_bytes < b->best->peak_bytes; });
  if (order.size() > groups) order.resize(groups);
  std::vector<ClosestMiss> out;
  for (const Group* g : order) {
    ClosestMiss m;
    m.job = make_job(base, g->best->point);
    m.configuration = describe(m.job);
    m.peak_bytes = g->best->peak_bytes;
    m.shortfall_bytes = m.peak_bytes - report.memory_limit;
    m.variants = g->count;
    advise(m, report.memory_limit, report.memory_headroom);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace partune::search
