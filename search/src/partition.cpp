#include "partune/search/partition.hpp"

#include "partune/costmodel/job_costs.hpp"

#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>

#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/parameter_count.hpp"

namespace partune::search {

namespace {

// The untied items in chain order, each carrying the cost of the items tied to it.
struct Chain {
  std::vector<int> item;            // chain position -> item index
  std::vector<double> time, memory; // folded costs
  std::vector<int> layers;          // transformer layers at this position (0 or 1)
};

Chain fold(const std::vector<PartitionItem>& items) {
  Chain c;
  std::vector<int> position(items.size(), -1);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const PartitionItem& it = items[i];
    if (it.tied_to >= 0) {
      if (it.tied_to >= static_cast<int>(i) || items[it.tied_to].tied_to >= 0)
        throw std::invalid_argument("partition: item '" + it.name + "' must tie to an earlier, untied item");
      const int p = position[it.tied_to];
      c.time[p] += it.time;
      c.memory[p] += it.memory;
      c.layers[p] += it.is_layer ? 1 : 0;
      continue;
    }
    position[i] = static_cast<int>(c.item.size());
    c.item.push_back(static_cast<int>(i));
    c.time.push_back(it.time);
    c.memory.push_back(it.memory);
    c.layers.push_back(it.is_layer ? 1 : 0);
  }
  return c;
}

Partition finish(const std::vector<PartitionItem>& items, const Chain& c, const std::vector<int>& cuts, int stages,
                 double w) {
  // cuts[s] = first chain position of stage s; cuts[stages] = chain size.
  Partition p;
  p.stage_of.assign(items.size(), 0);
  p.stage_layers.assign(stages, 0);
  p.stage_time.assign(stages, 0);
  p.stage_memory.assign(stages, 0);
  double total_time = 0, total_memory = 0;
  for (std::size_t k = 0; k < c.item.size(); ++k) total_time += c.time[k], total_memory += c.memory[k];
  for (int s = 0; s < stages; ++s)
    for (int k = cuts[s]; k < cuts[s + 1]; ++k) {
      p.stage_of[c.item[k]] = s;
      p.stage_time[s] += c.time[k];
      p.stage_memory[s] += c.memory[k];
      p.stage_layers[s] += c.layers[k];
    }
  for (std::size_t i = 0; i < items.size(); ++i)
    if (items[i].tied_to >= 0) p.stage_of[i] = p.stage_of[items[i].tied_to];
  p.objective = 0;
  for (int s = 0; s < stages; ++s) {
    const double load = (1 - w) * (total_time > 0 ? p.stage_time[s] / total_time : 0) +
                        w * (total_memory > 0 ? p.stage_memory[s] / total_memory : 0);
    p.objective = std::max(p.objective, load);
  }
  return p;
}

void check(int stages, double w, const Chain& c) {
  if (stages < 1) throw std::invalid_argument("partition: stages must be >= 1");
  if (w < 0 || w > 1) throw std::invalid_argument("partition: memory_weight must be in [0, 1]");
  int layers = 0;
  for (int l : c.layers) layers += l;
  if (layers < stages) throw std::invalid_argument("partition: fewer layers than stages");
}

}  // namespace

Partition partition_chain(const std::vector<PartitionItem>& items, int stages, double w) {
  const Chain c = fold(items);
  check(stages, w, c);
  const int n = static_cast<int>(c.item.size());
  std::vector<double> pt(n + 1, 0), pm(n + 1, 0);
  std::vector<int> pl(n + 1, 0);
  for (int k = 0; k < n; ++k) pt[k + 1] = pt[k] + c.time[k], pm[k + 1] = pm[k] + c.memory[k], pl[k + 1] = pl[k] + c.layers[k];
  const double T = pt[n] > 0 ? pt[n] : 1, M = pm[n] > 0 ? pm[n] : 1;
  auto load = [&](int a, int b) { return (1 - w) * (pt[b] - pt[a]) / T + w * (pm[b] - pm[a]) / M; };
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the smallest max-load splitting positions [0, i) into s stages.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> from(stages + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int i = 1; i <= n; ++i)
      for (int j = 0; j < i; ++j) {
        if (best[s - 1][j] == inf || pl[i] - pl[j] < 1) continue;  // a stage needs a layer
        const double v = std::max(best[s - 1][j], load(j, i));
        // Ties go to the earliest cut, so the answer is deterministic.
        if (v < best[s][i]) best[s][i] = v, from[s][i] = j;
      }
  if (best[stages][n] == inf) throw std::invalid_argument("partition: no split gives every stage a layer");
  std::vector<int> cuts(stages + 1, n);
  for (int s = stages, i = n; s >= 1; --s) {
    cuts[s] = i;
    i = from[s][i];
    cuts[s - 1] = i;
  }
  cuts[0] = 0;
  return finish(items, c, cuts, stages, w);
}

Partition partition_brute_force(const std::vector<PartitionItem>& items, int stages, double w) {
  const Chain c = fold(items);
  check(stages, w, c);
  const int n = static_cast<int>(c.item.size());
  Partition best;
  best.objective = std::numeric_limits<double>::infinity();
  std::vector<int> cuts(stages + 1, 0);
  cuts[stages] = n;
  // Every increasing choice of stages - 1 cut positions in (0, n).
  std::function<void(int, int)> choose = [&](int s, int start) {
    if (s == stages) {
      for (int t = 0; t < stages; ++t) {
        int layers = 0;
        for (int k = cuts[t]; k < cuts[t + 1]; ++k) layers += c.layers[k];
        if (layers < 1) return;
      }
      Partition p = finish(items, c, cuts, stages, w);
      if (p.objective < best.objective - 1e-15) best = p;
      return;
    }
    for (int k = start; k <= n - (stages - s); ++k) {
      cuts[s] = k;
      choose(s + 1, k + 1);
    }
  };
  choose(1, 1);
  if (stages == 1) best = finish(items, c, cuts, 1, w);
  if (best.stage_of.empty()) throw std::invalid_argument("partition: no split gives every stage a layer");
  return best;
}

std::vector<PartitionItem> model_items(const Job& job) {
  const ModelSpec& m = job.model;
  const ParallelConfig& pc = job.parallel;
  const JobCosts costs(job);  // the layer plan's times (sequence parallelism included)
  const HeadTime& ht = costs.head_time();
  const RankParameters& rank = costs.rank();
  // Weights with their gradients and optimizer state (parameter_bytes: 16 bytes a
  // parameter with mixed-precision Adam), sharded as the job shards them, plus stored
  // activations.
  const double state_bytes =
      parameter_bytes(job).total() / pc.sharded_data_parallel_degree;
  const double activations = stored_layer_bytes(job, costs.layer(false), costs.layer(true));
  std::vector<PartitionItem> items;
  items.push_back({"embedding", ht.embedding_fwd + ht.embedding_bwd, rank.embedding * state_bytes, false, -1});
  for (int l = 0; l < m.layers; ++l) {
    // Each layer by its kind (a mixture of experts' layers with experts are heavier).
    const bool moe = m.is_moe_layer(l);
    const LayerTime& lt = costs.layer_time(moe);
    items.push_back({"layer" + std::to_string(l), lt.forward() + lt.backward() + lt.recompute(pc.activation_checkpointing),
                     rank.layer(moe) * state_bytes + activations, true, -1});
  }
  // The head's final norm, and its projection when it is not the embedding's (tied: the
  // head item ties to the embedding's stage).
  items.push_back({"head", ht.logits_fwd + ht.logits_bwd, rank.head * state_bytes + logits_bytes(costs.head()),
                   false, m.tied_embeddings ? 0 : -1});
  return items;
}

}  // namespace partune::search
