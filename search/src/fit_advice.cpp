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

// The job's own knobs a job as written may turn to shrink its peak (the search turns them
// by itself): sharding the optimizer state or the model states, full checkpointing,
// FlashAttention.
std::vector<Change> layout_changes(const Job& job) {
  const ParallelConfig& pc = job.parallel;
  const int dp = job.data_context_degree();
  std::vector<Change> out;
  if (dp > 1 && pc.sharded_data_parallel_degree == 1 && !pc.shard_optimizer_state)
    out.push_back({"parallel.shard_optimizer_state: true", "shard_optimizer_state=true",
                   [](Job& j) { j.parallel.shard_optimizer_state = true; }});
  if (dp > 1 && pc.sharded_data_parallel_degree < dp && pc.expert_parallel_degree == 1)
    out.push_back({fmt::format("parallel.sharded_data_parallel_degree: {}", dp),
                   fmt::format("sharded_data_parallel_degree={}", dp),
                   [dp](Job& j) { j.parallel.sharded_data_parallel_degree = dp; }});
  if (pc.activation_checkpointing != Checkpointing::full)
    out.push_back({"parallel.activation_checkpointing: full", "activation_checkpointing=full",
                   [](Job& j) { j.parallel.activation_checkpointing = Checkpointing::full; }});
  if (!pc.flash_attention)
    out.push_back({"parallel.flash_attention: true", "flash_attention=true",
                   [](Job& j) { j.parallel.flash_attention = true; }});
  return out;
}

struct Fits {
  std::vector<FitChange> changes;  // at most two alone, fastest first; or one pair
  bool together = false;
};

// `changes` then more nodes, each alone (of the node counts only the smallest that fits),
// beside `extra` (already checked); else one of `changes` with more nodes.
Fits changes_that_fit(const Job& job, std::vector<Change> changes, double limit, std::vector<FitChange> alone = {}) {
  const std::size_t knob_count = changes.size();
  for (Change& c : node_changes(job)) changes.push_back(std::move(c));
  bool nodes_fit = false;
  for (std::size_t i = 0; i < changes.size(); ++i) {
    if (i >= knob_count && nodes_fit) break;
    FitChange f;
    if (!try_changes(job, {&changes[i]}, limit, f)) continue;
    alone.push_back(joined({&changes[i]}, f));
    nodes_fit = nodes_fit || i >= knob_count;
  }
  Fits out;
  std::stable_sort(alone.begin(), alone.end(),
                   [](const FitChange& a, const FitChange& b) { return a.step_time < b.step_time; });
  if (alone.size() > 2) alone.resize(2);
  if (!alone.empty()) {
    out.changes = std::move(alone);
    return out;
  }
  // No one change: the fastest pair that fits (two knobs, or a knob and the smallest node
  // count that fits with it).
  FitChange best;
  bool found = false;
  for (std::size_t i = 0; i < knob_count; ++i)
    for (std::size_t n = i + 1; n < changes.size(); ++n) {
      FitChange f;
      if (!try_changes(job, {&changes[i], &changes[n]}, limit, f)) continue;
      if (!found || f.step_time < best.step_time) best = joined({&changes[i], &changes[n]}, f);
      found = true;
      if (n >= knob_count) break;  // larger node counts than the smallest that fits: slower
    }
  if (found) {
    out.changes.push_back(best);
    out.together = true;
  }
  return out;
}

void advise(ClosestMiss& miss, double limit, double headroom) {
  const Job& job = miss.job;
  // A smaller headroom, where the candidate fits in the HBM itself.
  std::vector<FitChange> extra;
  const double hbm = job.cluster.instance.gpu.hbm_bytes;
  if (headroom > 0 && miss.peak_bytes <= hbm) {
    const double free_share = std::floor(100.0 * (hbm - miss.peak_bytes) / hbm) / 100.0;
    FitChange f;
    f.option = fmt::format("--memory-headroom {:.2f}", free_share);
    f.peak_bytes = miss.peak_bytes;
    f.step_time = estimate(job).step_time;
    extra.push_back(f);
  }
  Fits fits = changes_that_fit(job, state_changes(job), limit, extra);
  miss.changes = std::move(fits.changes);
  miss.together = fits.together;
}

}  // namespace

std::vector<ClosestMiss> closest_misses(const SearchReport& report, const Job& base, std::size_t groups) {
  using Layout = std::tuple<int, int, int, int, int, int>;
  struct Group {
    const Pruned* best = nullptr;
    long count = 0;
  };
  std::map<Layout, Group> layouts;
  for (const Pruned& p : report.pruned) {
    if (p.stage != Pruned::Stage::memory) continue;
    Group& g = layouts[{p.point.pipeline, p.point.tensor, p.point.context, p.point.expert, p.point.expert_tensor,
                         p.point.sharded}];
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

std::vector<FitChange> changes_to_fit(const Job& job, bool* together) {
  std::vector<Change> changes = layout_changes(job);
  for (Change& c : state_changes(job)) changes.push_back(std::move(c));
  Fits fits = changes_that_fit(job, std::move(changes), job.cluster.instance.gpu.hbm_bytes);
  if (together) *together = fits.together;
  return fits.changes;
}

}  // namespace partune::search
