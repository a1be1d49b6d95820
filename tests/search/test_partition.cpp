// The automated partitioner: the dynamic program against every contiguous split (its
// own brute force and one written here from the header's objective), hand-worked chains,
// tied modules, and the errors.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/search/partition.hpp"

using namespace partune;
using namespace partune::search;

namespace {

PartitionItem layer(double time, double memory) { return {"layer", time, memory, true, -1}; }
PartitionItem extra(const std::string& name, double time, double memory, int tied_to = -1) {
  return {name, time, memory, false, tied_to};
}

// Every optimal split of `items`, found here from the header's definition alone: the
// untied items form the chain, a tied item's cost counts on its anchor's stage, each
// stage needs >= 1 layer, objective = max over stages of the weighted normalised load.
struct Reference {
  double objective = std::numeric_limits<double>::infinity();
  int optimal_splits = 0;           // splits within 1e-12 of the optimum
  std::vector<int> stage_of;        // of one optimal split (meaningful when unique)
  bool feasible = false;
};

Reference reference_partition(const std::vector<PartitionItem>& items, int stages, double w) {
  const int n_items = static_cast<int>(items.size());
  std::vector<int> chain;  // untied item indices
  for (int i = 0; i < n_items; ++i)
    if (items[i].tied_to < 0) chain.push_back(i);
  const int n = static_cast<int>(chain.size());
  double total_time = 0, total_memory = 0;
  for (const auto& it : items) total_time += it.time, total_memory += it.memory;

  // All splits first, then the optimum and how many splits reach it.
  std::vector<std::pair<double, std::vector<int>>> splits;
  std::vector<int> stage_of_chain(n, 0);
  std::function<void(int, int)> place = [&](int pos, int stage) {
    // Chain position `pos` is the first of stage `stage`.
    if (stage == stages - 1) {
      for (int k = pos; k < n; ++k) stage_of_chain[k] = stage;
      std::vector<int> stage_of(n_items, -1);
      for (int k = 0; k < n; ++k) stage_of[chain[k]] = stage_of_chain[k];
      for (int i = 0; i < n_items; ++i)
        if (items[i].tied_to >= 0) stage_of[i] = stage_of[items[i].tied_to];
      std::vector<double> t(stages, 0), m(stages, 0);
      std::vector<int> layers(stages, 0);
      for (int i = 0; i < n_items; ++i) {
        t[stage_of[i]] += items[i].time;
        m[stage_of[i]] += items[i].memory;
        layers[stage_of[i]] += items[i].is_layer ? 1 : 0;
      }
      if (*std::min_element(layers.begin(), layers.end()) < 1) return;
      double obj = 0;
      for (int s = 0; s < stages; ++s)
        obj = std::max(obj, (1 - w) * t[s] / total_time + w * m[s] / total_memory);
      splits.push_back({obj, stage_of});
      return;
    }
    // Stage `stage` takes positions [pos, end); leave >= 1 position per later stage.
    for (int end = pos + 1; end <= n - (stages - 1 - stage); ++end) {
      for (int k = pos; k < end; ++k) stage_of_chain[k] = stage;
      place(end, stage + 1);
    }
  };
  if (n >= stages) place(0, 0);
  Reference r;
  for (const auto& [obj, so] : splits)
    if (obj < r.objective) r.objective = obj, r.stage_of = so;
  for (const auto& [obj, so] : splits)
    if (obj <= r.objective + 1e-12) ++r.optimal_splits;
  r.feasible = !splits.empty();
  return r;
}

// A Partition is internally consistent: its per-stage sums come from stage_of, every
// stage has a layer, tied items sit with their anchors, the objective is the maximum load.
void check_consistent(const std::vector<PartitionItem>& items, int stages, double w, const Partition& p) {
  REQUIRE(p.stage_of.size() == items.size());
  REQUIRE(p.stage_layers.size() == static_cast<std::size_t>(stages));
  REQUIRE(p.stage_time.size() == static_cast<std::size_t>(stages));
  REQUIRE(p.stage_memory.size() == static_cast<std::size_t>(stages));
  std::vector<double> t(stages, 0), m(stages, 0);
  std::vector<int> layers(stages, 0);
  double total_time = 0, total_memory = 0;
  int last_stage = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const int s = p.stage_of[i];
    REQUIRE(s >= 0);
    REQUIRE(s < stages);
    t[s] += items[i].time;
    m[s] += items[i].memory;
    layers[s] += items[i].is_layer ? 1 : 0;
    total_time += items[i].time;
    total_memory += items[i].memory;
    if (items[i].tied_to >= 0) {
      CHECK(s == p.stage_of[items[i].tied_to]);
    } else {
      CHECK(s >= last_stage);  // contiguous: the chain's stages never go back
      CHECK(s <= last_stage + 1);
      last_stage = s;
    }
  }
  CHECK(last_stage == stages - 1);
  double obj = 0;
  for (int s = 0; s < stages; ++s) {
    CHECK(p.stage_layers[s] == layers[s]);
    CHECK(p.stage_layers[s] >= 1);
    CHECK(p.stage_time[s] == Approx(t[s]).epsilon(1e-12).margin(1e-15));
    CHECK(p.stage_memory[s] == Approx(m[s]).epsilon(1e-12).margin(1e-15));
    obj = std::max(obj, (1 - w) * t[s] / total_time + w * m[s] / total_memory);
  }
  CHECK(std::abs(p.objective - obj) <= 1e-12);
}

}  // namespace

TEST_CASE("partition_chain matches brute force on random small chains", "[search][partition]") {
  std::mt19937 rng(20240611);
  auto uniform = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  auto pick = [&](int a, int b) { return std::uniform_int_distribution<int>(a, b)(rng); };
  const double weights[] = {0.0, 0.3, 0.5, 1.0};
  int compared = 0, unique_compared = 0, infeasible = 0, with_ties = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const int n = pick(3, 12);
    const int stages = pick(1, 5);
    const double w = weights[pick(0, 3)];
    // Some cases use small integer costs so that equal items (and tied optima) occur.
    const bool integer_costs = pick(0, 2) == 0;
    auto cost = [&] { return integer_costs ? static_cast<double>(pick(1, 3)) : uniform(0.05, 2.0); };
    std::vector<PartitionItem> items;
    const bool lead = pick(0, 1) == 1;            // an embedding-like first item
    const int tail = pick(0, std::min(2, n - 1 - (lead ? 1 : 0)));  // non-layer items at the end
    if (lead) items.push_back(extra("embedding", cost(), cost()));
    while (static_cast<int>(items.size()) < n - tail) items.push_back(layer(cost(), cost()));
    for (int k = 0; k < tail; ++k) {
      // A tail item may tie to an earlier untied item (the head to the embedding, or any).
      int tied = -1;
      if (pick(0, 1) == 1) {
        std::vector<int> anchors;
        for (int i = 0; i < static_cast<int>(items.size()); ++i)
          if (items[i].tied_to < 0) anchors.push_back(i);
        tied = lead && pick(0, 1) == 1 ? 0 : anchors[pick(0, static_cast<int>(anchors.size()) - 1)];
      }
      items.push_back(extra("tail" + std::to_string(k), cost(), cost(), tied));
    }
    // Occasionally a layer in the middle that ties to an earlier layer (shared weights).
    if (n >= 5 && pick(0, 4) == 0) {
      const int i = pick(2, static_cast<int>(items.size()) - 1);
      const int anchor = pick(lead ? 1 : 0, i - 1);
      if (items[i].is_layer && items[anchor].tied_to < 0 && items[anchor].is_layer) {
        bool anchors_others = false;
        for (const auto& it : items) anchors_others = anchors_others || it.tied_to == i;
        if (!anchors_others) items[i].tied_to = anchor;
      }
    }
    bool tied = false;
    for (const auto& it : items) tied = tied || it.tied_to >= 0;
    with_ties += tied ? 1 : 0;

    std::string shape;
    for (const auto& it : items)
      shape += (it.is_layer ? "L" : "x") + (it.tied_to >= 0 ? "->" + std::to_string(it.tied_to) : std::string()) +
               "(" + std::to_string(it.time) + "," + std::to_string(it.memory) + ") ";
    INFO("trial " << trial << ": " << stages << " stages, memory_weight " << w << ", items " << shape);

    const Reference ref = reference_partition(items, stages, w);
    if (!ref.feasible) {
      ++infeasible;
      CHECK_THROWS_AS(partition_chain(items, stages, w), std::invalid_argument);
      CHECK_THROWS_AS(partition_brute_force(items, stages, w), std::invalid_argument);
      continue;
    }
    const Partition dp = partition_chain(items, stages, w);
    const Partition bf = partition_brute_force(items, stages, w);
    ++compared;
    CHECK(std::abs(dp.objective - ref.objective) <= 1e-12);
    CHECK(std::abs(bf.objective - ref.objective) <= 1e-12);
    CHECK(std::abs(dp.objective - bf.objective) <= 1e-12);
    check_consistent(items, stages, w, dp);
    check_consistent(items, stages, w, bf);
    if (ref.optimal_splits == 1) {
      ++unique_compared;
      CHECK(dp.stage_of == ref.stage_of);
      CHECK(bf.stage_of == ref.stage_of);
    }
  }
  INFO("compared " << compared << ", unique " << unique_compared << ", infeasible " << infeasible << ", tied "
                   << with_ties);
  CHECK(compared > 1000);
  CHECK(unique_compared > 500);
  CHECK(infeasible > 10);
  CHECK(with_ties > 200);
}

TEST_CASE("partition_chain: hand-worked chains", "[search][partition]") {
  SECTION("four equal layers into two stages: two each") {
    const std::vector<PartitionItem> items(4, layer(1, 1));
    for (double w : {0.0, 0.5, 1.0}) {
      const Partition p = partition_chain(items, 2, w);
      CHECK(p.stage_layers == std::vector<int>{2, 2});
      CHECK(p.stage_of == std::vector<int>{0, 0, 1, 1});
      CHECK(p.objective == Approx(0.5));
    }
  }
  SECTION("six equal layers into three stages; one stage holds all") {
    const std::vector<PartitionItem> items(6, layer(2, 3));
    CHECK(partition_chain(items, 3, 0.3).stage_layers == std::vector<int>{2, 2, 2});
    const Partition one = partition_chain(items, 1, 0.3);
    CHECK(one.stage_layers == std::vector<int>{6});
    CHECK(one.objective == Approx(1.0));
  }
  SECTION("a heavy last layer gets a stage of its own") {
    // Times 1,1,1,3: [3 | 1] gives loads 3/6 and 3/6; [2 | 2] gives 4/6.
    const std::vector<PartitionItem> items = {layer(1, 1), layer(1, 1), layer(1, 1), layer(3, 1)};
    const Partition p = partition_chain(items, 2, 0.0);
    CHECK(p.stage_layers == std::vector<int>{3, 1});
    CHECK(p.objective == Approx(0.5));
    CHECK(p.stage_time == std::vector<double>{3, 3});
  }
  SECTION("memory_weight 1 balances memory only; 0 balances time only") {
    // Time is heavy at the end, memory at the start.
    const std::vector<PartitionItem> items = {layer(1, 3), layer(1, 1), layer(1, 1), layer(3, 1)};
    const Partition by_time = partition_chain(items, 2, 0.0);
    CHECK(by_time.stage_layers == std::vector<int>{3, 1});
    CHECK(by_time.stage_time == std::vector<double>{3, 3});
    const Partition by_memory = partition_chain(items, 2, 1.0);
    CHECK(by_memory.stage_layers == std::vector<int>{1, 3});
    CHECK(by_memory.stage_memory == std::vector<double>{3, 3});
    CHECK(by_memory.objective == Approx(0.5));
    // Half and half: [1 | 3] loads 0.5*(1/6 + 3/6) = 1/3 and 0.5*(5/6 + 3/6) = 2/3;
    // [2 | 2]: 0.5*(2/6 + 4/6) = 0.5 and 0.5*(4/6 + 2/6) = 0.5; [3 | 1]: 2/3 and 1/3.
    const Partition half = partition_chain(items, 2, 0.5);
    CHECK(half.stage_layers == std::vector<int>{2, 2});
    CHECK(half.objective == Approx(0.5));
  }
  SECTION("a heavy non-layer first item still shares its stage with a layer") {
    // Unconstrained, [embedding | L L] would be best; every stage needs a layer.
    const std::vector<PartitionItem> items = {extra("embedding", 10, 1), layer(1, 1), layer(1, 1)};
    const Partition p = partition_chain(items, 2, 0.0);
    CHECK(p.stage_of == std::vector<int>{0, 0, 1});
    CHECK(p.stage_layers == std::vector<int>{1, 1});
    CHECK(p.objective == Approx(11.0 / 12.0));
  }
  SECTION("a tied head counts on its anchor's stage") {
    // embedding (1), four layers (1 each), head (3) tied to the embedding; total 8.
    // Stage 0 carries 1 + 3 before any layer: [emb L | L L L] loads 5/8 and 3/8,
    // [emb L L | L L] 6/8 and 2/8, so the first wins with one layer on stage 0.
    const std::vector<PartitionItem> items = {extra("embedding", 1, 1), layer(1, 1), layer(1, 1), layer(1, 1),
                                              layer(1, 1), extra("head", 3, 1, 0)};
    const Partition p = partition_chain(items, 2, 0.0);
    CHECK(p.stage_of == std::vector<int>{0, 0, 1, 1, 1, 0});
    CHECK(p.stage_layers == std::vector<int>{1, 3});
    CHECK(p.stage_time == std::vector<double>{5, 3});
    CHECK(p.objective == Approx(5.0 / 8.0));
    // Untied, the head ends the chain: it is on the last stage, which then takes fewer layers.
    std::vector<PartitionItem> untied = items;
    untied.back().tied_to = -1;
    const Partition q = partition_chain(untied, 2, 0.0);
    CHECK(q.stage_of.back() == 1);
    CHECK(q.stage_layers == std::vector<int>{3, 1});
  }
}

TEST_CASE("model_items: tied embeddings put the head on stage 0, untied on the last stage", "[search][partition]") {
  using testing::p4d_job;
  SECTION("gpt2-small (tied)") {
    Job job = p4d_job("gpt2-small", 1, 16);
    job.parallel.pipeline_parallel_degree = 4;
    job.parallel.tensor_parallel_degree = 2;
    job.parallel.microbatches = 16;
    testing::require_valid(job);
    const std::vector<PartitionItem> items = model_items(job);
    REQUIRE(items.size() == static_cast<std::size_t>(job.model.layers + 2));
    CHECK_FALSE(items.front().is_layer);
    CHECK_FALSE(items.back().is_layer);
    CHECK(items.back().tied_to == 0);
    int layers = 0;
    for (const auto& it : items) {
      layers += it.is_layer ? 1 : 0;
      CHECK(it.time > 0);
      CHECK(it.memory >= 0);
    }
    CHECK(layers == job.model.layers);
    for (double w : {0.0, 0.5, 1.0}) {
      INFO("memory_weight " << w);
      const Partition p = partition_chain(items, 4, w);
      CHECK(p.stage_of.front() == 0);
      CHECK(p.stage_of.back() == 0);  // the head beside the embedding it shares
      int sum = 0;
      for (int l : p.stage_layers) {
        CHECK(l >= 1);
        sum += l;
      }
      CHECK(sum == job.model.layers);
      CHECK(std::abs(p.objective - partition_brute_force(items, 4, w).objective) <= 1e-12);
    }
    // Balancing time: the head's logits (50257 x 768) cost several layers, so the first
    // stage, which carries it, holds fewer layers than the last.
    const Partition by_time = partition_chain(items, 4, 0.0);
    CHECK(by_time.stage_layers.front() < by_time.stage_layers.back());
  }
  SECTION("gpt-neox-13b (untied)") {
    Job job = p4d_job("gpt-neox-13b", 1, 8);
    job.parallel.pipeline_parallel_degree = 4;
    job.parallel.tensor_parallel_degree = 2;
    job.parallel.microbatches = 8;
    testing::require_valid(job);
    REQUIRE_FALSE(job.model.tied_embeddings);
    const std::vector<PartitionItem> items = model_items(job);
    REQUIRE(items.size() == static_cast<std::size_t>(job.model.layers + 2));
    CHECK(items.back().tied_to == -1);
    for (double w : {0.0, 0.5, 1.0}) {
      INFO("memory_weight " << w);
      const Partition p = partition_chain(items, 4, w);
      CHECK(p.stage_of.front() == 0);
      CHECK(p.stage_of.back() == 3);
      int sum = 0;
      for (int l : p.stage_layers) {
        CHECK(l >= 1);
        sum += l;
      }
      CHECK(sum == job.model.layers);
    }
    // The head (untied, at the end) weighs on the last stage: it holds no more layers
    // than the first.
    const Partition by_time = partition_chain(items, 4, 0.0);
    CHECK(by_time.stage_layers.back() <= by_time.stage_layers.front());
  }
}

TEST_CASE("partition_chain: errors are std::invalid_argument", "[search][partition]") {
  const std::vector<PartitionItem> three = {extra("embedding", 1, 1), layer(1, 1), layer(1, 1), layer(1, 1),
                                            extra("head", 1, 1)};
  for (auto* fn : {&partition_chain, &partition_brute_force}) {
    // Fewer layers than stages (non-layer items do not count).
    CHECK_THROWS_AS(fn(three, 4, 0.5), std::invalid_argument);
    CHECK_NOTHROW(fn(three, 3, 0.5));
    CHECK_THROWS_AS(fn(three, 0, 0.5), std::invalid_argument);
    // memory_weight outside [0, 1].
    CHECK_THROWS_AS(fn(three, 2, -0.01), std::invalid_argument);
    CHECK_THROWS_AS(fn(three, 2, 1.01), std::invalid_argument);
    CHECK_NOTHROW(fn(three, 2, 0.0));
    CHECK_NOTHROW(fn(three, 2, 1.0));
    // A tie to a later item, to itself, or to an item that is itself tied.
    std::vector<PartitionItem> later = three;
    later[1].tied_to = 3;
    CHECK_THROWS_AS(fn(later, 2, 0.5), std::invalid_argument);
    std::vector<PartitionItem> self = three;
    self[2].tied_to = 2;
    CHECK_THROWS_AS(fn(self, 2, 0.5), std::invalid_argument);
    std::vector<PartitionItem> chained = three;
    chained[3].tied_to = 0;
    chained[4].tied_to = 3;
    CHECK_THROWS_AS(fn(chained, 2, 0.5), std::invalid_argument);
    // Ties that remove layers from the chain can leave too few to split.
    std::vector<PartitionItem> folded = three;
    folded[2].tied_to = 1;
    folded[3].tied_to = 1;
    CHECK_THROWS_AS(fn(folded, 2, 0.5), std::invalid_argument);
    CHECK_NOTHROW(fn(folded, 1, 0.5));
  }
}

TEST_CASE("model_items: a module's model states at the job's bytes per parameter", "[search][partition]") {
  // GPT-2 small on tensor degree 2 (hand counts: tests/costmodel/test_program.cpp): a
  // layer holds 7,083,264 / 2 + 4,608 parameters on a rank, the embedding
  // 38,597,376 / 2 + 786,432, the (tied) head its final norm, 1,536. Mixed-precision Adam
  // keeps 2 + 2 + 12 = 16 bytes a parameter, mixed SGD 2 + 2 + 8 = 12: only the states
  // differ between the two jobs (activations and logits are the same), so the items
  // differ by the parameters times 4.
  using testing::p4d_job;
  Job adam = p4d_job("gpt2-small", 1, 16);
  adam.parallel.tensor_parallel_degree = 2;
  adam.parallel.microbatches = 4;
  testing::require_valid(adam);
  Job sgd = adam;
  sgd.training.optimizer = Optimizer::sgd;
  const double layer = 7083264.0 / 2 + 4608.0, embedding = 38597376.0 / 2 + 786432.0, head = 1536.0;
  const std::vector<PartitionItem> a = model_items(adam), s = model_items(sgd);
  REQUIRE(a.size() == s.size());
  CHECK(a.front().memory - s.front().memory == Approx(embedding * 4).epsilon(1e-12));
  CHECK(a[1].memory - s[1].memory == Approx(layer * 4).epsilon(1e-12));
  CHECK(a.back().memory - s.back().memory == Approx(head * 4).epsilon(1e-9));
  // Sharded over 2 ranks of sharded data parallelism: half the states.
  Job sharded = adam;
  sharded.parallel.sharded_data_parallel_degree = 2;
  const std::vector<PartitionItem> h = model_items(sharded);
  CHECK(a.front().memory - h.front().memory == Approx(embedding * 8).epsilon(1e-12));
}
