// The search space: what enumerate() visits (legal, distinct, complete), a count worked
// out by hand, placement de-duplication by communication groups, restrict_space and
// matches().
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "job_fixtures.hpp"
#include "partune/costmodel/placement.hpp"
#include "partune/search/space.hpp"

using namespace partune;
using namespace partune::search;
using testing::p4d_job;

namespace {

// The knobs of a point other than its placement.
using Knobs = std::tuple<int, int, int, int, int, int, int, int, bool, bool, bool, bool, bool, int, int>;
Knobs knobs_of(const Point& p) {
  return {p.pipeline, p.tensor, p.sharded, p.microbatch_size, p.microbatches, p.virtual_stages,
          static_cast<int>(p.schedule), static_cast<int>(p.checkpointing), p.offload, p.shard_optimizer,
          p.shard_gradients, p.flash, p.sequence_parallel, static_cast<int>(p.sharded_collective),
          p.checkpointed_layers};
}

// The communication groups a placement gives: for each axis, the set of its groups
// (each a sorted list of global ranks). Two placements are the same when these are.
using Groups = std::vector<std::set<std::vector<int>>>;
Groups groups_of(PlacementOrder order, int dp, int pp, int tp) {
  const Placement pl(order, dp, pp, tp);
  Groups g(3);
  const Axis axes[] = {Axis::data, Axis::pipeline, Axis::tensor};
  for (int a = 0; a < 3; ++a)
    for (int r = 0; r < pl.world_size(); ++r) {
      std::vector<int> members = pl.group(r, axes[a]);
      std::sort(members.begin(), members.end());
      g[a].insert(members);
    }
  return g;
}

std::vector<Point> visit_all(const Job& base, const SearchSpace& space, EnumerationStats* stats = nullptr) {
  std::vector<Point> points;
  const EnumerationStats s = enumerate(base, space, [&](const Point& p) { points.push_back(p); });
  if (stats) *stats = s;
  return points;
}

SearchSpace restricted(const std::vector<std::string>& fixes) {
  SearchSpace s;
  for (const auto& f : fixes) restrict_space(s, f);
  return s;
}

// Every boolean knob (and checkpointing, and the sharded collective) pinned to one value.
const std::vector<std::string> kPinned = {"activation_checkpointing=none", "offload_activations=false",
                                          "shard_optimizer_state=false", "flash_attention=false",
                                          "sharded_collective=ring", "sequence_parallel=false"};

// restrict_space's message when it throws std::invalid_argument ("" if it does not).
std::string rejection(const std::string& assignment) {
  SearchSpace s;
  try {
    restrict_space(s, assignment);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("enumerate visits only legal, distinct points", "[search][space]") {
  struct Case {
    const char* model;
    int nodes, batch;
  };
  const Case cases[] = {{"gpt2-small", 1, 16}, {"gpt2-xl", 2, 32}, {"gpt3-2.7b", 2, 64}};
  for (const Case& c : cases) {
    INFO(c.model << " on " << c.nodes << " p4d, global batch " << c.batch);
    const Job base = p4d_job(c.model, c.nodes, c.batch);
    EnumerationStats stats;
    const std::vector<Point> points = visit_all(base, SearchSpace{}, &stats);
    REQUIRE(!points.empty());
    CHECK(stats.legal == static_cast<long>(points.size()));
    CHECK(stats.considered >= stats.legal + stats.invalid);
    std::set<std::pair<Knobs, Groups>> seen;
    std::set<std::string> descriptions;
    for (const Point& p : points) {
      const Job job = make_job(base, p);
      const JobViolation v = check_job(job);
      INFO(describe(job) << ": " << v.key << ": " << v.reason);
      CHECK_FALSE(v);
      // The point's knobs reach the job; what is not searched stays the base's.
      CHECK(job.parallel.pipeline_parallel_degree == p.pipeline);
      CHECK(job.parallel.tensor_parallel_degree == p.tensor);
      CHECK(job.parallel.sharded_data_parallel_degree == p.sharded);
      CHECK(job.microbatch_size() == p.microbatch_size);
      CHECK(static_cast<long>(job.data_parallel_degree()) * p.microbatches * p.microbatch_size ==
            base.training.global_batch);
      CHECK(job.model.name == base.model.name);
      CHECK(job.cluster.nodes == base.cluster.nodes);
      CHECK(job.training.global_batch == base.training.global_batch);
      // No two visited points give the same configuration and the same groups.
      const auto key = std::make_pair(knobs_of(p), groups_of(p.placement, job.data_parallel_degree(),
                                                          p.pipeline, p.tensor));
      CHECK(seen.insert(key).second);
      descriptions.insert(describe(job) + " " + to_string(p.sharded_collective));
    }
    // describe() plus the collective tells the visited points apart.
    CHECK(descriptions.size() == points.size());
  }
}

TEST_CASE("enumerate: the count of a small space, worked out by hand", "[search][space]") {
  // gpt2-small (12 layers, 12 heads, ffn 3072) on one p4d node (8 GPUs), global batch 16,
  // checkpointing, offload, ZeRO-1, FlashAttention and the sharded collective pinned.
  //   pp in {1, 2, 4} (divide 8 and 12); tp in {1, 2, 4} (8 does not divide 12 heads);
  //   pp x tp must divide 8: all pairs but (4, 4).  dp = 8 / (pp tp).
  //   sdp: divisors of dp that are powers of two (or dp):  dp 8: 4, dp 4: 3, dp 2: 2, dp 1: 1.
  //   micro-batch size b: powers of two with dp b | 16:    dp 8: 2, dp 4: 3, dp 2: 4, dp 1: 5.
  //   schedules: pp 1: one; pp > 1: simple, 1F1B, 1F1B v2 (needs 12 % (2 pp) == 0 and
  //   microbatches % pp == 0), 1F1B v4 (needs 12 % (4 pp) == 0: never here), and ZB-H1
  //   without sharded data parallelism (sdp 1 only), and ZBV (sdp 1, 12 % (2 pp) == 0: pp 2
  //   only, and at least 2 pp = 4 micro-batches: 16 / (dp b) >= 4).
  //   distinct placements: 1 with one axis > 1, 2 with two, 6 with three.
  //   (1,1) dp8: 4 sdp x 2 b x 1 x 1                                   =   8
  //   (1,2) dp4: 3 x 3 x 1 x 2                                         =  18
  //   (1,4) dp2: 2 x 4 x 1 x 2                                         =  16
  //   (2,1) dp4: 3 sdp x (b 1,2: 3 schedules; b 4 (1 micro-batch): 2) x 2 = 3 x 8 x 2  =  48
  //              + ZB-H1 at sdp 1: 3 b x 2 + ZBV: b 1 x 2               =  +8
  //   (2,2) dp2: 2 x (b 1,2,4: 3; b 8: 2 = 11) x 6 + ZB-H1: 4 b x 6
  //              + ZBV: b 1, 2 x 6                                      = 168
  //   (2,4) dp1: 1 x (b 1,2,4,8: 3; b 16: 2 = 14) x 2 + ZB-H1: 5 x 2
  //              + ZBV: b 1, 2, 4 x 2                                   =  44
  //   (4,1) dp2: 2 x (4 b x 2 schedules) x 2 + ZB-H1: 4 x 2            =  40
  //   (4,2) dp1: 1 x (5 b x 2 schedules) x 2 + ZB-H1: 5 x 2            =  30
  //   total                                                            = 380
  const Job base = p4d_job("gpt2-small", 1, 16);
  EnumerationStats stats;
  const std::vector<Point> points = visit_all(base, restricted(kPinned), &stats);
  CHECK(points.size() == 380);
  CHECK(stats.legal == 380);

  // The same count per (pp, tp), from the table above.
  std::map<std::pair<int, int>, int> per_pair;
  for (const Point& p : points) ++per_pair[{p.pipeline, p.tensor}];
  const std::map<std::pair<int, int>, int> expected = {{{1, 1}, 8},  {{1, 2}, 18}, {{1, 4}, 16}, {{2, 1}, 56},
                                                       {{2, 2}, 168}, {{2, 4}, 44}, {{4, 1}, 40}, {{4, 2}, 30}};
  CHECK(per_pair == expected);

  // Completeness: for each configuration, the visited placements are exactly the
  // distinct group structures the six orders give.
  std::map<Knobs, std::set<Groups>> visited;
  for (const Point& p : points) {
    const int dp = 8 / (p.pipeline * p.tensor);
    CHECK(visited[knobs_of(p)].insert(groups_of(p.placement, dp, p.pipeline, p.tensor)).second);
  }
  for (const auto& [k, structures] : visited) {
    const int pp = std::get<0>(k), tp = std::get<1>(k), dp = 8 / (pp * tp);
    std::set<Groups> all;
    for (PlacementOrder order : PlacementOrder::all()) all.insert(groups_of(order, dp, pp, tp));
    CHECK(structures == all);
  }
}

TEST_CASE("enumerate: sequence parallelism doubles the points with a tensor-parallel group", "[search][space]") {
  // The hand count above (kPinned has sequence_parallel=false), by (pp, tp):
  // tp 1: (1,1) 8 + (2,1) 56 + (4,1) 40 = 104 points, sequence parallelism never applies;
  // tp > 1: (1,2) 18 + (1,4) 16 + (2,2) 168 + (2,4) 44 + (4,2) 30 = 276 points, each also
  // with it (gpt2-small's 1024 tokens split over 2 and 4).
  const Job base = p4d_job("gpt2-small", 1, 16);
  std::vector<std::string> free_sp(kPinned.begin(), kPinned.end() - 1);
  REQUIRE(free_sp.size() == kPinned.size() - 1);
  const std::vector<Point> points = visit_all(base, restricted(free_sp));
  CHECK(points.size() == 104 + 2 * 276);
  for (const Point& p : points)
    if (p.sequence_parallel) CHECK(p.tensor > 1);
  free_sp.push_back("sequence_parallel=true");  // --fix sequence_parallel=true
  const std::vector<Point> only_sp = visit_all(base, restricted(free_sp));
  CHECK(only_sp.size() == 276);
  for (const Point& p : only_sp) {
    CHECK(p.sequence_parallel);
    CHECK(make_job(base, p).parallel.sequence_parallel);
    CHECK_THAT(describe(make_job(base, p)), Catch::EndsWith(" sp"));
  }
}

TEST_CASE("enumerate: gradient sharding, when asked, goes only beside the optimizer state's", "[search][space]") {
  // kPinned with shard_optimizer_state free gives each point with data parallelism
  // (dp > 1) twice, ZeRO-1 off and on; asking for shard_gradients too adds a third, ZeRO-2,
  // to each of those and to no other.
  const Job base = p4d_job("gpt2-small", 1, 16);
  std::vector<std::string> fixes = {"activation_checkpointing=none", "offload_activations=false",
                                    "flash_attention=false", "sharded_collective=ring", "sequence_parallel=false",
                                    "shard_optimizer_state=false,true"};
  const std::vector<Point> without = visit_all(base, restricted(fixes));
  long zero1 = 0;
  for (const Point& p : without) zero1 += p.shard_optimizer;
  REQUIRE(zero1 > 0);
  fixes.push_back("shard_gradients=false,true");
  const std::vector<Point> with = visit_all(base, restricted(fixes));
  CHECK(static_cast<long>(with.size()) == static_cast<long>(without.size()) + zero1);
  long zero2 = 0;
  for (const Point& p : with) {
    if (!p.shard_gradients) continue;
    ++zero2;
    CHECK(p.shard_optimizer);
    const Job job = make_job(base, p);
    CHECK(job.parallel.shard_gradients);
    CHECK_THAT(describe(job), Catch::Contains(" zero2") && !Catch::Contains("zero1"));
  }
  CHECK(zero2 == zero1);
}

TEST_CASE("enumerate: Llama 3's stages where the layers alone do not split", "[search][space]") {
  // Six layers on one 8-GPU node: pipeline degrees 1 and 2 split them (2: v 1 evenly);
  // 4 and 8 do not, but 6 + 2 = 8 chunks' worth do, the first and the last chunk one layer
  // short (Dubey et al. 2024, sec. 3.3.2): 4 chunks [1,2,2,1], 8 chunks [0,1,1,1,1,1,1,0]
  // (the embedding alone first, the head alone last). 16 chunks split neither way.
  Job base = p4d_job("gpt2-small", 1, 16);
  base.model.layers = 6;
  std::vector<std::string> fixes(kPinned.begin(), kPinned.end());
  fixes.push_back("tensor_parallel_degree=1");
  const std::vector<Point> points = visit_all(base, restricted(fixes));
  const std::vector<int> four = {1, 2, 2, 1}, eight = {0, 1, 1, 1, 1, 1, 1, 0};
  std::set<std::pair<int, int>> short_ends;  // (pipeline, chunks)
  for (const Point& p : points) {
    const Job job = make_job(base, p);
    const int chunks = p.pipeline * p.virtual_stages;
    INFO(describe(job));
    if (6 % chunks == 0) {
      CHECK(p.layer_split == LayerSplit::even);
      CHECK(job.parallel.stage_layers.empty());
      continue;
    }
    REQUIRE(p.layer_split == LayerSplit::ends_short);
    CHECK(job.parallel.stage_layers == (chunks == 4 ? four : eight));
    CHECK_THAT(describe(job), Catch::Contains(" ends-1"));
    short_ends.insert({p.pipeline, chunks});
  }
  // pp 2 interleaved over 2 and 4 chunks a GPU, pp 4 with 1 and 2. Not pp 8 with one
  // chunk a GPU: its first and last stage would hold no layer, which the job rules allow
  // only to an interleaved schedule's end chunks.
  CHECK(short_ends == std::set<std::pair<int, int>>{{2, 4}, {2, 8}, {4, 4}, {4, 8}});
}

TEST_CASE("enumerate: placements that give the same groups are visited once", "[search][space]") {
  const Job base = p4d_job("gpt2-small", 1, 16);
  std::vector<std::string> fixes = kPinned;
  fixes.push_back("pipeline_parallel_degree=1");
  fixes.push_back("tensor_parallel_degree=1");
  SECTION("tp 1 and pp 1: the six orders are one") {
    EnumerationStats stats;
    const std::vector<Point> points = visit_all(base, restricted(fixes), &stats);
    CHECK(points.size() == 8);  // 4 sdp x 2 micro-batch sizes
    CHECK(stats.duplicates == 5);
    std::set<std::string> placements;
    for (const Point& p : points) placements.insert(p.placement.name());
    CHECK(placements.size() == 1);
    // Pinning one order (or naming it cluster / spread) gives the same count.
    for (const char* order : {"cluster", "spread", "PTD"}) {
      std::vector<std::string> f = fixes;
      f.push_back(std::string("placement_strategy=") + order);
      CHECK(visit_all(base, restricted(f)).size() == 8);
    }
  }
  SECTION("tp 2, pp 1: two distinct orders out of six") {
    fixes.back() = "tensor_parallel_degree=2";
    EnumerationStats stats;
    const std::vector<Point> points = visit_all(base, restricted(fixes), &stats);
    CHECK(stats.duplicates == 4);
    CHECK(points.size() == 18);
    std::set<std::string> tensor_strides;
    for (const Point& p : points) {
      const Placement pl(p.placement, 4, 1, 2);
      tensor_strides.insert(std::to_string(pl.stride(Axis::tensor)));
    }
    CHECK(tensor_strides == std::set<std::string>{"1", "4"});  // inside pairs, or across
  }
  SECTION("pp 2, tp 2, dp 2: all six orders differ") {
    fixes[fixes.size() - 2] = "pipeline_parallel_degree=2";
    fixes.back() = "tensor_parallel_degree=2";
    EnumerationStats stats;
    const std::vector<Point> points = visit_all(base, restricted(fixes), &stats);
    CHECK(stats.duplicates == 0);
    CHECK(points.size() == 168);  // the (2,2) row of the hand count
  }
}

TEST_CASE("restrict_space parses key=v1,v2 and rejects what it cannot use", "[search][space]") {
  SearchSpace s;
  restrict_space(s, "tensor_parallel_degree=2,4");
  CHECK(s.tensor_degrees == std::vector<int>{2, 4});
  restrict_space(s, "parallel.pipeline_parallel_degree=8");  // the job file's dotted key
  CHECK(s.pipeline_degrees == std::vector<int>{8});
  restrict_space(s, "sharded_data_parallel_degree=1,2");
  CHECK(s.sharded_degrees == std::vector<int>{1, 2});
  restrict_space(s, "microbatch_size=1,2,4");
  CHECK(s.microbatch_sizes == std::vector<int>{1, 2, 4});
  restrict_space(s, "virtual_stages=2");
  CHECK(s.virtual_stages == std::vector<int>{2});
  restrict_space(s, "pipeline=simple,interleaved");
  CHECK(s.schedules == std::vector<PipelineSchedule>{PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b});
  restrict_space(s, "placement_strategy=cluster,spread,PDT");
  REQUIRE(s.placements.size() == 3);
  CHECK(s.placements[0].name() == "DPT");
  CHECK(s.placements[1].name() == "TPD");
  CHECK(s.placements[2].name() == "PDT");
  restrict_space(s, "activation_checkpointing=none,full");
  CHECK(s.checkpointing == std::vector<Checkpointing>{Checkpointing::none, Checkpointing::full});
  restrict_space(s, "offload_activations=true");
  CHECK(s.offload_activations == std::vector<bool>{true});
  restrict_space(s, "shard_optimizer_state=false,true");
  CHECK(s.shard_optimizer_state == std::vector<bool>{false, true});
  restrict_space(s, "flash_attention=on");
  CHECK(s.flash_attention == std::vector<bool>{true});
  restrict_space(s, "parallel.sequence_parallel=true");
  CHECK(s.sequence_parallel == std::vector<bool>{true});
  restrict_space(s, "sharded_collective=all_to_all,ring");
  CHECK(s.sharded_collectives == std::vector<CollectiveAlgorithm>{CollectiveAlgorithm::all_to_all,
                                                                   CollectiveAlgorithm::ring});
  // A later restriction of the same key replaces the earlier one.
  restrict_space(s, "tensor_parallel_degree=8");
  CHECK(s.tensor_degrees == std::vector<int>{8});

  // Unknown keys and bad values: std::invalid_argument naming the key (and the value).
  struct Bad {
    const char* assignment;
    std::vector<const char*> mentions;
  };
  const Bad bad[] = {
      {"nonsense=1", {"nonsense"}},
      {"tensor_parallel_degree=eight", {"tensor_parallel_degree", "eight"}},
      {"tensor_parallel_degree=0", {"tensor_parallel_degree", "0"}},
      {"pipeline_parallel_degree=2,x", {"pipeline_parallel_degree", "x"}},
      {"microbatch_size=-2", {"microbatch_size"}},
      {"flash_attention=maybe", {"flash_attention", "maybe"}},
      {"sequence_parallel=yes", {"sequence_parallel", "yes"}},
      {"pipeline=zigzag", {"pipeline", "zigzag"}},
      {"placement_strategy=DDP", {"placement_strategy", "DDP"}},
      {"activation_checkpointing=half", {"activation_checkpointing", "half"}},
      {"sharded_collective=butterfly", {"sharded_collective", "butterfly"}},
      {"tensor_parallel_degree=", {"tensor_parallel_degree"}},
      {"microbatches=4", {"microbatches"}},  // derived from the batch, not a knob
      {"tensor_parallel_degree", {"tensor_parallel_degree"}},
      {"=2", {}},
  };
  for (const Bad& b : bad) {
    INFO("--fix " << b.assignment);
    const std::string message = rejection(b.assignment);
    CHECK_FALSE(message.empty());
    for (const char* m : b.mentions) CHECK_THAT(message, Catch::Contains(m));
  }
}

TEST_CASE("a restricted space visits only the allowed values", "[search][space]") {
  const Job base = p4d_job("gpt2-small", 2, 32);
  const SearchSpace space = restricted({"tensor_parallel_degree=2,4", "activation_checkpointing=full",
                                        "flash_attention=true", "pipeline=simple", "microbatch_size=2"});
  const std::vector<Point> points = visit_all(base, space);
  REQUIRE(!points.empty());
  std::set<int> tps;
  for (const Point& p : points) {
    tps.insert(p.tensor);
    CHECK(p.checkpointing == Checkpointing::full);
    CHECK(p.flash);
    CHECK(p.microbatch_size == 2);
    if (p.pipeline > 1) CHECK(p.schedule == PipelineSchedule::gpipe);
    CHECK(p.virtual_stages == 1);
  }
  CHECK(tps == std::set<int>{2, 4});
  // A value no job can take leaves nothing (tp 3 does not divide the 16 GPUs).
  CHECK(visit_all(base, restricted({"tensor_parallel_degree=3"})).empty());
}

TEST_CASE("matches() filters jobs as restrict_space restricts the space", "[search][space]") {
  Job job = p4d_job("gpt2-small", 1, 16);
  job.parallel.pipeline_parallel_degree = 2;
  job.parallel.tensor_parallel_degree = 2;
  job.parallel.microbatches = 4;
  job.parallel.placement_strategy = PlacementOrder::parse("cluster");
  job.parallel.activation_checkpointing = Checkpointing::full;
  testing::require_valid(job);
  CHECK(matches(job, {}));
  CHECK(matches(job, {"tensor_parallel_degree=2"}));
  CHECK(matches(job, {"tensor_parallel_degree=1,2", "pipeline_parallel_degree=2"}));
  CHECK(matches(job, {"placement_strategy=DPT"}));
  CHECK(matches(job, {"microbatch_size=2"}));  // 16 / (dp 2 x 4 micro-batches)
  CHECK(matches(job, {"activation_checkpointing=full", "flash_attention=false"}));
  CHECK_FALSE(matches(job, {"tensor_parallel_degree=4"}));
  CHECK_FALSE(matches(job, {"tensor_parallel_degree=2", "pipeline_parallel_degree=4"}));
  CHECK_FALSE(matches(job, {"placement_strategy=spread"}));
  CHECK_FALSE(matches(job, {"microbatch_size=4"}));
  CHECK_FALSE(matches(job, {"activation_checkpointing=none,selective"}));
  CHECK_THROWS_AS(matches(job, {"nonsense=1"}), std::invalid_argument);
  CHECK_THROWS_AS(matches(job, {"tensor_parallel_degree=two"}), std::invalid_argument);

  // Over a whole space, the points matching a filter are the points of the space
  // restricted by it (keys whose de-duplication does not depend on the restriction).
  const Job base = p4d_job("gpt2-small", 1, 16);
  const std::vector<Point> all = visit_all(base, SearchSpace{});
  for (const std::vector<std::string>& filter :
       {std::vector<std::string>{"tensor_parallel_degree=2"},
        std::vector<std::string>{"microbatch_size=1,4", "activation_checkpointing=selective"},
        std::vector<std::string>{"pipeline_parallel_degree=2", "sharded_data_parallel_degree=2"},
        std::vector<std::string>{"flash_attention=true", "offload_activations=true"}}) {
    INFO("filter " << filter.front());
    long matching = 0;
    for (const Point& p : all) matching += matches(make_job(base, p), filter) ? 1 : 0;
    CHECK(matching > 0);
    CHECK(matching == static_cast<long>(visit_all(base, restricted(filter)).size()));
  }
}

TEST_CASE("pin_from_job keeps the job's own values", "[search][space]") {
  Job job = p4d_job("gpt2-small", 1, 16);
  job.parallel.pipeline_parallel_degree = 2;
  job.parallel.tensor_parallel_degree = 2;
  job.parallel.microbatches = 4;
  job.parallel.placement_strategy = PlacementOrder::parse("spread");
  job.parallel.flash_attention = true;
  SearchSpace s;
  pin_from_job(s, job, {"pipeline_parallel_degree", "tensor_parallel_degree", "microbatch_size",
                        "placement_strategy", "flash_attention"});
  CHECK(s.pipeline_degrees == std::vector<int>{2});
  CHECK(s.tensor_degrees == std::vector<int>{2});
  CHECK(s.microbatch_sizes == std::vector<int>{2});
  REQUIRE(s.placements.size() == 1);
  CHECK(s.placements[0].name() == "TPD");
  CHECK(s.flash_attention == std::vector<bool>{true});
  CHECK(s.schedules.empty());
  CHECK_THROWS_AS(pin_from_job(s, job, {"nonsense"}), std::invalid_argument);
}

// A job file's opt-in knob (off in the default space) is what the search then tries beside
// off; a search: section or --fix still wins (issue 53: the hint "offload_optimizer: true"
// written into the job used to change nothing).
TEST_CASE("requested_space tries the opt-in knobs a job file turns on", "[search][space]") {
  Job job = p4d_job("gpt2-small", 1, 16);
  CHECK(requested_space(job, "job.yaml").offload_optimizer.empty());  // the default: off only
  job.parallel.offload_optimizer = true;
  job.parallel.shard_gradients = true;
  const SearchSpace s = requested_space(job, "job.yaml");
  CHECK(s.offload_optimizer == std::vector<bool>{false, true});
  CHECK(s.shard_gradients == std::vector<bool>{false, true});
  CHECK(s.offload_parameters.empty());
  CHECK(requested_space(job, "job.yaml", {"offload_optimizer=false"}).offload_optimizer == std::vector<bool>{false});
}

// The base job's per-layout settings (stage_layers, checkpointed_layers, lm_head_stage)
// belong to its own degrees: a point starts uniform, or the base's layout would reject
// every point it does not suit (regression).
TEST_CASE("a base job's stage_layers does not restrict the pipeline degrees searched", "[search][space]") {
  Job base = p4d_job("gpt2-small", 1, 16);
  base.parallel.pipeline_parallel_degree = 2;
  base.parallel.microbatches = 2;
  base.parallel.stage_layers = {5, 7};
  testing::require_valid(base);
  const std::vector<Point> points = visit_all(base, restricted(kPinned));
  std::set<int> pps;
  for (const Point& p : points) pps.insert(p.pipeline);
  CHECK(pps == std::set<int>{1, 2, 4});
  CHECK(points.size() == 380);  // as without stage_layers
}

TEST_CASE("a base job's checkpointed_layers does not rule out activation_checkpointing none",
          "[search][space]") {
  Job base = p4d_job("gpt2-small", 1, 16);
  base.parallel.activation_checkpointing = Checkpointing::full;
  base.parallel.checkpointed_layers = 3;
  testing::require_valid(base);
  CHECK(visit_all(base, restricted(kPinned)).size() == 380);  // kPinned has checkpointing none
}

TEST_CASE("a base job's lm_head_stage first does not rule out pipeline degree 1", "[search][space]") {
  Job base = p4d_job("gpt2-small", 1, 16);
  base.parallel.pipeline_parallel_degree = 2;
  base.parallel.microbatches = 2;
  base.parallel.lm_head_stage = LmHeadStage::first;
  testing::require_valid(base);
  std::vector<std::string> fixes = kPinned;
  fixes.push_back("pipeline_parallel_degree=1");
  CHECK(visit_all(base, restricted(fixes)).size() == 8 + 18 + 16);  // the pp 1 rows of the hand count
}

TEST_CASE("enumerate: the experts' tensor degree is 1 or the tensor degree with experts, the tensor degree without",
          "[search][space][moe]") {
  // Mixtral 8x7B (8 experts) on one 8-GPU p4d node, global batch 16, pp 1, tp 2: dp 4.
  // Unfolded (etp = tp 2) an expert group is made of data-parallel ranks: ep in {1, 2, 4}.
  // Folded (etp 1, Megatron-Core's parallel folding) it is drawn from the 2 x 4 tensor x
  // data ranks: etp x ep divides 8, so ep in {2, 4, 8} (not 1: folding needs expert
  // parallelism), ep 8 above the data degree; and it needs sequence parallelism.
  std::vector<std::string> fixes = {"activation_checkpointing=none", "offload_activations=false",
                                    "shard_optimizer_state=false", "flash_attention=false",
                                    "pipeline_parallel_degree=1", "tensor_parallel_degree=2"};
  const Job moe = p4d_job("mixtral-8x7b", 1, 16);
  std::set<std::pair<int, int>> layouts;  // (etp, ep)
  for (const Point& p : visit_all(moe, restricted(fixes))) {
    const Job job = make_job(moe, p);
    INFO(describe(job));
    const int etp = job.expert_tensor_degree(), ep = job.parallel.expert_parallel_degree;
    layouts.insert({etp, ep});
    if (etp == 2) {
      CHECK(job.parallel.expert_tensor_parallel_degree == 0);  // unset: the tensor degree
      CHECK_THAT(describe(job), !Catch::Contains("etp"));
      continue;
    }
    CHECK(job.parallel.sequence_parallel);
    CHECK_THAT(describe(job), Catch::Contains(" ep" + std::to_string(ep) + " etp1 "));
  }
  CHECK(layouts == std::set<std::pair<int, int>>{{2, 1}, {2, 2}, {2, 4}, {1, 2}, {1, 4}, {1, 8}});
  // --fix expert_tensor_parallel_degree=1 keeps the folded ones only.
  fixes.push_back("expert_tensor_parallel_degree=1");
  std::set<int> fixed;
  for (const Point& p : visit_all(moe, restricted(fixes))) fixed.insert(make_job(moe, p).expert_tensor_degree());
  CHECK(fixed == std::set<int>{1});
  // A dense model: the tensor degree only, never written into the job.
  fixes.pop_back();
  const Job dense = p4d_job("gpt2-small", 1, 16);
  const std::vector<Point> points = visit_all(dense, restricted(fixes));
  REQUIRE_FALSE(points.empty());
  for (const Point& p : points) {
    const Job job = make_job(dense, p);
    CHECK(job.parallel.expert_tensor_parallel_degree == 0);
    CHECK(job.parallel.expert_parallel_degree == 1);
  }
}

TEST_CASE("enumerate: Megatron's split of DeepSeek-V3's 61 layers, embedding and loss counted as layers",
          "[search][space][moe]") {
  // 61 layers + the embedding + the loss = 63 slots; over c chunks, ceil(63 / c) a chunk,
  // the first one layer short (the embedding), the last holding what is left beside the
  // loss. Over 8 stages x 4 chunks (Megatron's "Et|(tt|)*30L"): 2 a chunk, the first 1,
  // 30 chunks of 2, the last none (1 + 60 + 0 = 61).
  std::vector<int> thirty_two(32, 2);
  thirty_two.front() = 1, thirty_two.back() = 0;
  CHECK(split_layers(LayerSplit::embedding_and_loss, 61, 32) == thirty_two);
  // 8 chunks: 8 a chunk: 7, six of 8, then 61 - 7 - 48 = 6. 16 chunks: 4: 3, 14 x 4, 2.
  CHECK(split_layers(LayerSplit::embedding_and_loss, 61, 8) == std::vector<int>{7, 8, 8, 8, 8, 8, 8, 6});
  std::vector<int> sixteen(16, 4);
  sixteen.front() = 3, sixteen.back() = 2;
  CHECK(split_layers(LayerSplit::embedding_and_loss, 61, 16) == sixteen);
  // Where layers + 2 divide it is Llama 3's, listed as such; where the layers divide, none.
  CHECK(split_layers(LayerSplit::embedding_and_loss, 61, 7).empty());
  CHECK(split_layers(LayerSplit::ends_short, 61, 7) == std::vector<int>{8, 9, 9, 9, 9, 9, 8});
  CHECK(split_layers(LayerSplit::embedding_and_loss, 60, 4).empty());
  // 64 chunks: 1 a chunk, the first none, 62 of 1 are more than 61: no split.
  CHECK(split_layers(LayerSplit::embedding_and_loss, 61, 64).empty());

  // The search tries it: DeepSeek-V3 (61 layers, a prime) on 16 p4d nodes (128 GPUs),
  // tp 1 and ep 8, where only pp 1 splits the layers evenly, visits the pipeline degrees
  // that leave 8 data-parallel ranks for the expert groups too: 2, 4, 8 and 16 (16 x 1
  // chunk: 3, 14 x 4, 2). Not 32: 4 data-parallel ranks.
  const Job base = p4d_job("deepseek-v3", 16, 1024);
  std::vector<std::string> fixes = {"activation_checkpointing=none", "offload_activations=false",
                                    "shard_optimizer_state=true", "flash_attention=true",
                                    "tensor_parallel_degree=1", "expert_parallel_degree=8", "microbatch_size=1",
                                    "placement_strategy=DPT"};
  std::set<int> pipelines;
  bool megatron_layout = false;
  for (const Point& p : visit_all(base, restricted(fixes))) {
    const Job job = make_job(base, p);
    INFO(describe(job));
    pipelines.insert(p.pipeline);
    if (p.pipeline == 8 && p.virtual_stages == 4) {
      CHECK(p.layer_split == LayerSplit::embedding_and_loss);
      CHECK(job.parallel.stage_layers == thirty_two);
      CHECK_THAT(describe(job), Catch::Contains(" ends-1/2"));
      megatron_layout = true;
    }
  }
  CHECK(pipelines == std::set<int>{1, 2, 4, 8, 16});
  CHECK(megatron_layout);
}
