// The two-tier search: on small spaces, the estimator's top K re-run by the simulator
// finds the configuration that simulating every fitting point finds; pruning against a
// pair-by-pair brute force; explain() words; the Latent Space case (pipeline across nodes
// beats tensor across nodes).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/expert_grid.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/search/space.hpp"
#include "partune/search/tuner.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;
using namespace partune::search;
using testing::p4d_job;

namespace {

SearchSpace restricted(const std::vector<std::string>& fixes) {
  SearchSpace s;
  for (const auto& f : fixes) restrict_space(s, f);
  return s;
}

std::string fixes_text(const std::vector<std::string>& fixes) {
  std::string s;
  for (const auto& f : fixes) s += " --fix " + f;
  return s;
}

// A point as comparable data (Point has no operator==).
using PointKey = std::tuple<int, int, int, int, int, int, int, std::string, int, bool, bool, bool, bool, int, int>;
PointKey key_of(const Point& p) {
  return {p.pipeline, p.tensor, p.sharded, p.microbatch_size, p.microbatches, p.virtual_stages,
          static_cast<int>(p.schedule), p.placement.name(), static_cast<int>(p.checkpointing), p.offload, p.shard_optimizer,
          p.flash, p.sequence_parallel, static_cast<int>(p.sharded_collective), p.checkpointed_layers};
}

struct SmallSpace {
  const char* model;
  int nodes, batch;
  std::vector<std::string> fixes;
};

// Spaces small enough to simulate every point (<= 40 legal points each), across
// models, node counts, batches and knobs.
const std::vector<SmallSpace>& small_spaces() {
  static const std::vector<SmallSpace> spaces = {
      // pipeline x tensor on one node, one placement
      {"gpt2-small", 1, 16,
       {"pipeline_parallel_degree=1,2", "tensor_parallel_degree=1,2", "sharded_data_parallel_degree=1",
        "placement_strategy=cluster", "activation_checkpointing=none", "offload_activations=false",
        "shard_optimizer_state=false", "flash_attention=true"}},
      // sharded data parallelism, collectives and ZeRO-1 on one node
      {"gpt2-small", 1, 32,
       {"pipeline_parallel_degree=1", "tensor_parallel_degree=1", "microbatch_size=2,4",
        "activation_checkpointing=none", "offload_activations=false", "flash_attention=true"}},
      // placements across two nodes: tensor inside or across nodes
      {"gpt2-small", 2, 32,
       {"pipeline_parallel_degree=2", "tensor_parallel_degree=2,4", "sharded_data_parallel_degree=1",
        "microbatch_size=2", "pipeline=interleaved", "virtual_stages=1", "activation_checkpointing=none",
        "offload_activations=false", "shard_optimizer_state=false", "flash_attention=true"}},
      // gpt2-xl on one node: memory prunes the large micro-batches without checkpointing
      {"gpt2-xl", 1, 64,
       {"tensor_parallel_degree=1", "pipeline_parallel_degree=1,2,4", "sharded_data_parallel_degree=1",
        "placement_strategy=cluster", "pipeline=interleaved", "virtual_stages=1",
        "activation_checkpointing=none,full", "offload_activations=false", "shard_optimizer_state=false",
        "flash_attention=true"}},
      // gpt2-xl on two nodes: GPipe against 1F1B and virtual stages
      {"gpt2-xl", 2, 32,
       {"tensor_parallel_degree=1", "pipeline_parallel_degree=4,8", "sharded_data_parallel_degree=1",
        "placement_strategy=cluster", "microbatch_size=1,2", "activation_checkpointing=full",
        "offload_activations=false", "shard_optimizer_state=false", "flash_attention=true"}},
      // gpt2-medium: checkpointing and FlashAttention choices
      {"gpt2-medium", 1, 32,
       {"pipeline_parallel_degree=1,2", "tensor_parallel_degree=2", "sharded_data_parallel_degree=1",
        "placement_strategy=cluster", "microbatch_size=2,4", "pipeline=interleaved", "virtual_stages=1",
        "shard_optimizer_state=false", "offload_activations=false"}},
      // gpt2-medium on two nodes: every placement of pp 2 x tp 2 x dp 4
      {"gpt2-medium", 2, 32,
       {"pipeline_parallel_degree=2", "tensor_parallel_degree=2", "sharded_data_parallel_degree=1",
        "microbatch_size=2,4", "pipeline=interleaved", "virtual_stages=1", "activation_checkpointing=none",
        "offload_activations=false", "shard_optimizer_state=false", "flash_attention=true"}},
      // gpt2-large (20 heads) on two nodes: tensor 2 or 4, pipeline 1 to 4
      {"gpt2-large", 2, 32,
       {"tensor_parallel_degree=2,4", "pipeline_parallel_degree=1,2,4", "sharded_data_parallel_degree=1",
        "placement_strategy=cluster", "microbatch_size=2", "pipeline=interleaved", "virtual_stages=1",
        "activation_checkpointing=selective", "offload_activations=false", "shard_optimizer_state=false",
        "flash_attention=true"}},
      // gpt3-2.7b (sequence 2048) on one node: tensor against pipeline
      {"gpt3-2.7b", 1, 8,
       {"tensor_parallel_degree=2,4,8", "pipeline_parallel_degree=1,2,4", "sharded_data_parallel_degree=1",
        "placement_strategy=cluster", "pipeline=interleaved", "virtual_stages=1",
        "activation_checkpointing=full", "offload_activations=false", "shard_optimizer_state=false",
        "flash_attention=true"}},
      // gpt3-2.7b on two nodes with sharded data parallelism
      {"gpt3-2.7b", 2, 16,
       {"tensor_parallel_degree=4,8", "pipeline_parallel_degree=1", "microbatch_size=1,2",
        "activation_checkpointing=full", "offload_activations=false", "shard_optimizer_state=false",
        "flash_attention=true", "sharded_collective=ring", "placement_strategy=cluster"}},
      // gpt3-2.7b on one node without checkpointing or sharding: tp 1 x pp 1 does not fit
      {"gpt3-2.7b", 1, 16,
       {"tensor_parallel_degree=1,2", "pipeline_parallel_degree=1,2", "sharded_data_parallel_degree=1",
        "placement_strategy=cluster", "pipeline=interleaved", "virtual_stages=1", "activation_checkpointing=none",
        "shard_optimizer_state=false", "flash_attention=true"}},
      // gpt2-small with offloading and checkpointing under a pipeline
      {"gpt2-small", 1, 16,
       {"pipeline_parallel_degree=2", "tensor_parallel_degree=2", "sharded_data_parallel_degree=1",
        "placement_strategy=cluster", "microbatch_size=1,4", "pipeline=simple", "flash_attention=true",
        "shard_optimizer_state=false"}},
  };
  return spaces;
}

}  // namespace

TEST_CASE("two tiers: the simulated top K finds the best of simulating every fitting point", "[search][tuner]") {
  int spaces_checked = 0, spaces_beyond_k = 0;
  for (const SmallSpace& sp : small_spaces()) {
    const Job base = p4d_job(sp.model, sp.nodes, sp.batch);
    SearchSpace space = restricted(sp.fixes);
    restrict_space(space, "checkpointed_layers=all");  // keeps each space small enough to simulate whole
    restrict_space(space, "sequence_parallel=false");  // likewise
    INFO(sp.model << " on " << sp.nodes << " p4d, global batch " << sp.batch << fixes_text(sp.fixes));

    // Exhaustive: every legal point that fits (by the estimator), simulated.
    std::vector<Point> points;
    enumerate(base, space, [&](const Point& p) { points.push_back(p); });
    REQUIRE(points.size() <= 40);
    std::vector<Job> jobs;  // the fitting ones
    for (const Point& p : points) {
      Job job = make_job(base, p);
      if (estimate(job).fits) jobs.push_back(std::move(job));
    }
    // Two at a time, each in its own child process.
    const std::vector<sim::SimOutcome> outcomes = sim::simulate_each(jobs, sim::SimOptions{}, 2);
    std::vector<double> steps(jobs.size(), std::numeric_limits<double>::infinity());
    std::vector<std::string> errors(jobs.size());
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      if (outcomes[i].ok && outcomes[i].result.metrics.fits) steps[i] = outcomes[i].result.metrics.step_time;
      if (!outcomes[i].ok) errors[i] = describe(jobs[i]) + ": " + outcomes[i].error;
    }
    for (const auto& e : errors) CHECK(e.empty());
    double best_step = std::numeric_limits<double>::infinity();
    std::string best_config;
    for (std::size_t i = 0; i < jobs.size(); ++i)
      if (steps[i] < best_step) best_step = steps[i], best_config = describe(jobs[i]);
    const int fitting = static_cast<int>(jobs.size());
    REQUIRE(fitting > 0);
    spaces_beyond_k += fitting > 8 ? 1 : 0;

    SearchOptions options;
    options.top_k = 8;
    options.workers = 2;
    // The exhaustive side simulates the enumerated points as they are; re-partitioning
    // would add points it does not have.
    options.auto_partition = false;
    options.memory_headroom = 0;  // "fits" as the exhaustive side counts it
    const SearchReport report = run_search(base, space, options);
    REQUIRE(!report.ranked.empty());
    const Candidate& best = report.ranked.front();
    INFO("exhaustive best " << best_config << " (" << best_step << " s); search best " << describe(best.job) << " ("
                            << best.score() << " s); " << points.size() << " legal, " << fitting << " fit");
    CHECK(best.simulated);
    CHECK(std::abs(best.simulation.step_time - best_step) <= 1e-9 * best_step);
    ++spaces_checked;
  }
  CHECK(spaces_checked >= 10);
  // Most spaces have more fitting points than K, so the first tier really chooses.
  CHECK(spaces_beyond_k >= 8);
}

// Pruning against brute force: a point is pruned for memory when the estimator says it
// does not fit, and dominated when some fitting point is faster by the margin and no
// larger, checked pair by pair (the tuner sorts and sweeps instead).
TEST_CASE("pruning matches a pair-by-pair brute force, the winner is the fastest fitting point",
          "[search][tuner]") {
  for (const SmallSpace& sp : small_spaces()) {
    const Job base = p4d_job(sp.model, sp.nodes, sp.batch);
    const SearchSpace space = restricted(sp.fixes);
    INFO(sp.model << " on " << sp.nodes << " p4d, global batch " << sp.batch << fixes_text(sp.fixes));
    struct Seen {
      Point point;
      Estimate e;
    };
    std::vector<Seen> all;
    enumerate(base, space, [&](const Point& p) { all.push_back({p, estimate(make_job(base, p))}); });
    const double margin = 0.10;
    std::set<PointKey> too_large, dominated, survivors;
    double fastest = std::numeric_limits<double>::infinity();
    for (const Seen& a : all) {
      if (!a.e.fits) {
        too_large.insert(key_of(a.point));
        continue;
      }
      fastest = std::min(fastest, a.e.step_time);
      bool beaten = false;
      for (const Seen& b : all)
        beaten = beaten || (b.e.fits && b.e.step_time <= (1 - margin) * a.e.step_time &&
                            b.e.memory.total() <= a.e.memory.total());
      (beaten ? dominated : survivors).insert(key_of(a.point));
    }
    for (int top_k : {1, 2, 8}) {
      INFO("top_k " << top_k);
      SearchOptions options;
      options.top_k = top_k;
      options.simulate = false;
      options.dominance_margin = margin;
      options.auto_partition = false;  // the enumerated points as they are
      options.memory_headroom = 0;     // pruned for memory = does not fit (test_memory_headroom.cpp has the rest)
      const SearchReport r = run_search(base, space, options);
      std::set<PointKey> pruned_memory, pruned_dominated;
      for (const Pruned& pr : r.pruned)
        (pr.stage == Pruned::Stage::memory ? pruned_memory : pruned_dominated).insert(key_of(pr.point));
      CHECK(pruned_memory == too_large);
      CHECK(pruned_dominated == dominated);
      CHECK(r.pruned.size() == too_large.size() + dominated.size());  // none twice
      CHECK(r.estimated == static_cast<long>(all.size()));
      CHECK(static_cast<long>(r.ranked.size()) == std::min<long>(static_cast<long>(survivors.size()), 4L * top_k));
      REQUIRE(!r.ranked.empty());
      CHECK(r.ranked.front().estimate.step_time == fastest);
      CHECK(r.simulated == 0);
      CHECK(r.rejected.empty());
    }
  }
}

TEST_CASE("the search estimates every point of a space counted by hand", "[search][tuner]") {
  // gpt2-small on one p4d node, global batch 16, with checkpointing, offload, ZeRO-1,
  // FlashAttention, the sharded collective and sequence parallelism pinned: 380 points
  // (worked out in test_space.cpp, "the count of a small space, worked out by hand").
  const Job base = p4d_job("gpt2-small", 1, 16);
  SearchOptions options;
  options.simulate = false;
  const SearchReport r = run_search(base,
                                    restricted({"activation_checkpointing=none", "offload_activations=false",
                                                "shard_optimizer_state=false", "flash_attention=false",
                                                "sharded_collective=ring", "sequence_parallel=false"}),
                                    options);
  CHECK(r.estimated == 380);
}

TEST_CASE("explain() says why a pruned candidate was dropped", "[search][tuner]") {
  // gpt3-2.7b on one node without checkpointing or sharding: tp 1 x pp 1 (43 GB of
  // weights and optimizer state alone) does not fit in 40 GiB.
  const Job base = p4d_job("gpt3-2.7b", 1, 16);
  const SearchSpace space = restricted({"tensor_parallel_degree=1,2", "pipeline_parallel_degree=1,2",
                                        "sharded_data_parallel_degree=1", "placement_strategy=cluster",
                                        "pipeline=interleaved", "virtual_stages=1", "activation_checkpointing=none",
                                        "shard_optimizer_state=false", "flash_attention=true"});
  SearchOptions options;
  options.simulate = false;
  options.top_k = 2;
  options.memory_headroom = 0;  // dropped = does not fit
  const SearchReport r = run_search(base, space, options);
  REQUIRE(r.pruned_memory > 0);

  // A filter naming a memory-pruned point exactly: its line says it does not fit.
  const Pruned* memory = nullptr;
  for (const Pruned& pr : r.pruned)
    if (pr.stage == Pruned::Stage::memory) memory = &pr;
  REQUIRE(memory);
  const Job dropped = make_job(base, memory->point);
  const std::vector<std::string> exact = {
      "pipeline_parallel_degree=" + std::to_string(dropped.parallel.pipeline_parallel_degree),
      "tensor_parallel_degree=" + std::to_string(dropped.parallel.tensor_parallel_degree),
      "microbatch_size=" + std::to_string(dropped.microbatch_size()),
      std::string("activation_checkpointing=") + to_string(dropped.parallel.activation_checkpointing),
      std::string("pipeline=") + to_string(dropped.parallel.pipeline),
      "virtual_stages=" + std::to_string(dropped.parallel.virtual_stages)};
  INFO("dropped " << describe(dropped) << ", filters" << fixes_text(exact));
  const std::vector<std::string> lines = explain(r, base, exact);
  REQUIRE(!lines.empty());
  bool found = false;
  for (const auto& line : lines)
    found = found || (line.find("does not fit") != std::string::npos && line.find(describe(dropped)) != std::string::npos);
  CHECK(found);

  // Every line for a broad filter explains a drop (memory or dominated), capped at `limit`.
  const std::vector<std::string> none = explain(r, base, {"flash_attention=true"}, 3);
  CHECK(none.size() <= 4);  // three lines and "... and N more"
  for (std::size_t i = 0; i < std::min<std::size_t>(3, none.size()); ++i)
    CHECK((none[i].find("does not fit") != std::string::npos || none[i].find("dominated") != std::string::npos ||
           none[i].find("headroom") != std::string::npos));

  // Nothing in the space matches: a helpful message rather than silence.
  const std::vector<std::string> nothing = explain(r, base, {"tensor_parallel_degree=4"});
  REQUIRE(nothing.size() == 1);
  CHECK_THAT(nothing.front(), Catch::Contains("no candidate matches"));

  // The winner's own configuration was not pruned: the message says it is ranked.
  const Job& winner = r.ranked.front().job;
  std::vector<std::string> winner_filters = {
      "pipeline_parallel_degree=" + std::to_string(winner.parallel.pipeline_parallel_degree),
      "tensor_parallel_degree=" + std::to_string(winner.parallel.tensor_parallel_degree),
      "microbatch_size=" + std::to_string(winner.microbatch_size()),
      std::string("activation_checkpointing=") + to_string(winner.parallel.activation_checkpointing),
      std::string("pipeline=") + to_string(winner.parallel.pipeline),
      "virtual_stages=" + std::to_string(winner.parallel.virtual_stages)};
  const std::vector<std::string> kept = explain(r, base, winner_filters);
  REQUIRE(kept.size() == 1);
  CHECK_THAT(kept.front(), Catch::Contains("ranked"));

  // Unknown keys are errors, as with --fix.
  CHECK_THROWS_AS(explain(r, base, {"nonsense=1"}), std::invalid_argument);
}

TEST_CASE("Latent Space: gpt3-2.7b on 16 p4d prefers pipeline across nodes, tensor inside", "[search][tuner][latent]") {
  const Job base = p4d_job("gpt3-2.7b", 16, 512);
  SearchOptions options;
  options.simulate = false;
  options.top_k = 8;
  const SearchReport r = run_search(base, SearchSpace{}, options);
  REQUIRE(!r.ranked.empty());
  const Job& best = r.ranked.front().job;
  const int G = base.cluster.instance.gpus_per_node;
  const Placement pl(best.parallel.placement_strategy, best.data_parallel_degree(),
                     best.parallel.pipeline_parallel_degree, best.parallel.tensor_parallel_degree);
  INFO("best " << describe(best));
  CHECK(group_span(pl, Axis::tensor, G).nodes == 1);  // tensor-parallel groups inside nodes

  REQUIRE(r.has_pipeline_across_nodes);
  REQUIRE(r.has_tensor_across_nodes);
  const Job& pp_job = r.best_pipeline_across_nodes.job;
  const Job& tp_job = r.best_tensor_across_nodes.job;
  auto span = [&](const Job& j, Axis axis) {
    const Placement p(j.parallel.placement_strategy, j.data_parallel_degree(), j.parallel.pipeline_parallel_degree,
                      j.parallel.tensor_parallel_degree);
    return group_span(p, axis, G).nodes;
  };
  // Each representative is what its name says.
  CHECK(pp_job.parallel.pipeline_parallel_degree > 1);
  CHECK(span(pp_job, Axis::pipeline) > 1);
  CHECK(span(pp_job, Axis::tensor) == 1);
  CHECK(tp_job.parallel.tensor_parallel_degree > 1);
  CHECK(span(tp_job, Axis::tensor) > 1);
  CHECK(r.best_pipeline_across_nodes.estimate.fits);
  CHECK(r.best_tensor_across_nodes.estimate.fits);
  const double pp_step = r.best_pipeline_across_nodes.estimate.step_time;
  const double tp_step = r.best_tensor_across_nodes.estimate.step_time;
  WARN("Latent Space (estimator): pipeline across nodes " << describe(pp_job) << " " << pp_step
                                                          << " s/step; tensor across nodes " << describe(tp_job) << " "
                                                          << tp_step << " s/step; pipeline is " << tp_step / pp_step
                                                          << "x faster");
  CHECK(pp_step < tp_step);
  // The overall best is at least as fast as either representative.
  CHECK(r.ranked.front().estimate.step_time <= pp_step * (1 + 1e-12));
}

TEST_CASE("MoE parallel folding: whole experts keep their all-to-alls in a node and win", "[search][tuner][moe]") {
  // Mixtral 8x7B cut to 4 layers (8 experts of 14336, two a token) on two 8-GPU p4d nodes,
  // pp 1 and tp 8 with the tensor ranks fastest (DPT): a tensor group is a node, dp 2.
  // With the experts split like the attention (etp 8) an expert group is made of
  // data-parallel ranks: ep <= 2, and rank r's group is {r, r + 8}, one rank in each node,
  // so every dispatch and combine crosses EFA. Folded (etp 1) the 16 tensor x data ranks
  // regroup, expert ranks consecutive: ep 2, 4 or 8 (8 > dp) inside one node, on NVSwitch.
  Job base = p4d_job("mixtral-8x7b", 2, 32);
  base.model.layers = 4;
  const SearchSpace space = restricted({"pipeline_parallel_degree=1", "tensor_parallel_degree=8",
                                        "placement_strategy=DPT", "activation_checkpointing=none",
                                        "offload_activations=false", "shard_optimizer_state=true",
                                        "flash_attention=true", "microbatch_size=1"});
  SearchOptions options;
  options.simulate = false;
  options.workers = 2;
  const SearchReport report = run_search(base, space, options);
  REQUIRE_FALSE(report.ranked.empty());
  const Candidate& winner = report.ranked.front();
  INFO("winner " << winner.configuration << ": " << winner.estimate.step_time << " s, expert all-to-alls "
                 << winner.estimate.breakdown.expert_parallel_comm << " s");
  CHECK(winner.job.expert_tensor_degree() == 1);
  CHECK_THAT(winner.configuration, Catch::Contains(" etp1"));
  const int ep = winner.job.parallel.expert_parallel_degree;
  const Placement pl(winner.job.parallel.placement_strategy, 2, 1, 8);
  const std::vector<int> folded_group = expert_grid_group(winner.job, pl, 0, ExpertAxis::expert);
  REQUIRE(static_cast<int>(folded_group.size()) == ep);
  CHECK(folded_group.back() == ep - 1);  // ranks 0 .. ep - 1: rank 0's node
  // The winner unfolded: etp 8, so ep 2 at most, its expert groups across the nodes.
  Job unfolded = winner.job;
  unfolded.parallel.expert_tensor_parallel_degree = 0;
  unfolded.parallel.expert_parallel_degree = 2;
  testing::require_valid(unfolded);
  CHECK(expert_grid_group(unfolded, pl, 0, ExpertAxis::expert) == std::vector<int>{0, 8});
  const Estimate across = estimate(unfolded);
  INFO("unfolded " << describe(unfolded) << ": " << across.step_time << " s, expert all-to-alls "
                   << across.breakdown.expert_parallel_comm << " s");
  // Over NVSwitch (600 GB/s a GPU) rather than EFA (400 Gb/s a node, its 8 GPUs sharing it).
  CHECK(winner.estimate.breakdown.expert_parallel_comm < across.breakdown.expert_parallel_comm / 4);
  CHECK(winner.estimate.step_time < across.step_time);
}
