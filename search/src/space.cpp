#include "partune/search/space.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "partune/costmodel/placement.hpp"
#include "partune/search/knobs.hpp"

namespace partune::search {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool is_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

template <class T>
std::vector<T> or_default(const std::vector<T>& given, std::vector<T> fallback) {
  return given.empty() ? fallback : given;
}

}  // namespace

const std::vector<std::string>& placement_names() {
  static const std::vector<std::string> names = {"DPT", "DTP", "PDT", "PTD", "TDP", "TPD"};
  return names;
}

void restrict_space(SearchSpace& space, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument("'" + assignment + "': a restriction looks like key=value or key=v1,v2");
  const Knob& k = knob(assignment.substr(0, eq));
  const std::vector<std::string> values = split(assignment.substr(eq + 1), ',');
  if (values.empty()) throw std::invalid_argument(std::string(k.key) + ": no value given");
  k.restrict(space, values);
}

void pin_from_job(SearchSpace& space, const Job& base, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) knob(key).pin(space, base);
}

void apply(const Point& p, Job& job) {
  for (const Knob& k : knobs()) k.apply(p, job);
  // Layout settings of the base job belong to its own degrees; a point starts uniform
  // (the partitioner may set stages later).
  job.parallel.stage_layers.clear();
  job.parallel.lm_head_stage = LmHeadStage::last;
  job.training.gradient_accumulation = 1;
}

Job make_job(const Job& base, const Point& point) {
  Job job = base;
  apply(point, job);
  return job;
}

EnumerationStats enumerate(const Job& base, const SearchSpace& space,
                           const std::function<void(const Point&)>& visit) {
  EnumerationStats stats;
  const ModelSpec& m = base.model;
  const int world = base.world_size(), G = base.cluster.instance.gpus_per_node, B = base.training.global_batch;
  const bool half = base.training.precision == Precision::fp16 || base.training.precision == Precision::bf16;

  std::vector<int> pp_all, tp_all;
  for (int d = 1; d <= std::min(world, m.layers); ++d)
    if (world % d == 0 && m.layers % d == 0) pp_all.push_back(d);
  for (int t = 1; t <= G; t *= 2)
    if (m.heads % t == 0 && m.ffn_hidden % t == 0) tp_all.push_back(t);
  const auto pps = or_default(space.pipeline_degrees, pp_all);
  const auto tps = or_default(space.tensor_degrees, tp_all);
  const auto ckpts = or_default(space.checkpointing, {Checkpointing::none, Checkpointing::selective, Checkpointing::full});
  const auto offloads = or_default(space.offload_activations, {false, true});
  const auto opt_shards = or_default(space.shard_optimizer_state, {false, true});
  const auto flashes = or_default(space.flash_attention, half ? std::vector<bool>{false, true} : std::vector<bool>{false});
  // Sequence parallelism splits over the tensor-parallel group: only with one.
  auto sequence_splits = [&](int tp) {
    return or_default(space.sequence_parallel, tp > 1 ? std::vector<bool>{false, true} : std::vector<bool>{false});
  };
  const auto algos = or_default(space.sharded_collectives, {CollectiveAlgorithm::ring, CollectiveAlgorithm::all_to_all});
  std::vector<int> placement_ids;
  if (space.placements.empty()) {
    for (int i = 0; i < static_cast<int>(placement_names().size()); ++i) placement_ids.push_back(i);
  } else {
    for (const auto& p : space.placements)
      placement_ids.push_back(static_cast<int>(
          std::find(placement_names().begin(), placement_names().end(), Placement::canonical(p)) -
          placement_names().begin()));
  }

  Job scratch = base;
  for (int pp : pps)
    for (int tp : tps) {
      ++stats.considered;
      if (world % (pp * tp) != 0) {
        ++stats.invalid;
        continue;
      }
      const int dp = world / (pp * tp);
      std::vector<int> sdp_all;
      for (int d = 1; d <= dp; ++d)
        if (dp % d == 0 && (is_power_of_two(d) || d == dp)) sdp_all.push_back(d);
      std::vector<int> b_all;
      for (int b = 1; b <= B; b *= 2)
        if (B % (static_cast<long>(dp) * b) == 0) b_all.push_back(b);
      // Distinct placements: the ones that give the same strides on every axis with more
      // than one member produce the same groups.
      std::vector<int> placements;
      std::set<std::tuple<int, int, int>> seen;
      for (int id : placement_ids) {
        const Placement pl(placement_names()[id], dp, pp, tp);
        const auto key = std::make_tuple(dp > 1 ? pl.stride(Axis::data) : 0, pp > 1 ? pl.stride(Axis::pipeline) : 0,
                                         tp > 1 ? pl.stride(Axis::tensor) : 0);
        if (seen.insert(key).second) placements.push_back(id);
        else ++stats.duplicates;
      }
      const std::vector<bool> sps = sequence_splits(tp);
      for (int sdp : or_default(space.sharded_degrees, sdp_all))
        for (int b : or_default(space.microbatch_sizes, b_all)) {
          if (B % (static_cast<long>(dp) * b) != 0) {
            ++stats.considered, ++stats.invalid;
            continue;
          }
          const int microbatches = B / (dp * b);
          std::vector<std::pair<PipelineSchedule, int>> schedules;
          const auto sched_list =
              or_default(space.schedules, pp > 1 ? std::vector<PipelineSchedule>{PipelineSchedule::simple,
                                                                                 PipelineSchedule::interleaved}
                                                 : std::vector<PipelineSchedule>{PipelineSchedule::interleaved});
          for (PipelineSchedule sc : sched_list) {
            const auto vs = or_default(space.virtual_stages,
                                       sc == PipelineSchedule::interleaved && pp > 1 ? std::vector<int>{1, 2, 4}
                                                                                     : std::vector<int>{1});
            for (int v : vs) schedules.push_back({sc, v});
          }
          for (const auto& [sched, v] : schedules)
            for (int placement : placements)
              for (Checkpointing ck : ckpts)
                for (int ck_layers : ck == Checkpointing::none
                                         ? std::vector<int>{-1}
                                         : or_default(space.checkpointed_layers,
                                                      m.layers / pp >= 2 ? std::vector<int>{-1, m.layers / pp / 2}
                                                                         : std::vector<int>{-1}))
                for (bool off : offloads) {
                  if (off && ck == Checkpointing::none) continue;  // offload moves checkpoints
                  for (bool zero1 : opt_shards) {
                    if (zero1 && (sdp > 1 || dp == 1)) continue;  // sharded DP already shards it
                    for (bool fa : flashes)
                      for (bool sp : sps)
                      for (CollectiveAlgorithm algo : algos) {
                        if (sdp == 1 && algo != algos.front()) continue;  // no sharded collectives
                        ++stats.considered;
                        Point p;
                        p.pipeline = pp, p.tensor = tp, p.sharded = sdp;
                        p.microbatch_size = b, p.microbatches = microbatches, p.virtual_stages = v;
                        p.schedule = sched, p.placement = placement, p.checkpointing = ck;
                        p.offload = off, p.shard_optimizer = zero1, p.flash = fa, p.sharded_collective = algo;
                        p.sequence_parallel = sp;
                        p.checkpointed_layers = ck_layers;
                        apply(p, scratch);
                        if (check_job(scratch)) {
                          ++stats.invalid;
                          continue;
                        }
                        ++stats.legal;
                        visit(p);
                      }
                  }
                }
        }
    }
  return stats;
}

std::string describe(const Job& job) {
  std::string s;
  for (const Knob& k : knobs()) s += k.describe(job);
  // The layout the partitioner may choose (not a knob of the space).
  const ParallelConfig& pc = job.parallel;
  if (!pc.stage_layers.empty()) s += fmt::format(" stages[{}]", fmt::join(pc.stage_layers, ","));
  if (pc.lm_head_stage == LmHeadStage::first) s += " head-on-stage0";
  return s;
}

bool matches(const Job& job, const std::vector<std::string>& filters) {
  for (const std::string& f : filters) {
    SearchSpace probe;
    restrict_space(probe, f);  // validates the key and values
    for (const Knob& k : knobs())
      if (!k.allows(probe, job)) return false;
  }
  return true;
}

}  // namespace partune::search
