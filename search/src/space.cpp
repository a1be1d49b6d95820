#include "partune/search/space.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "partune/costmodel/placement.hpp"

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

int parse_int(const std::string& key, const std::string& v) {
  try {
    std::size_t used = 0;
    const int x = std::stoi(v, &used);
    if (used != v.size() || x < 1) throw std::invalid_argument("");
    return x;
  } catch (const std::exception&) {
    throw std::invalid_argument(key + ": '" + v + "' is not a positive integer");
  }
}

bool parse_bool(const std::string& key, const std::string& v) {
  if (v == "true" || v == "on" || v == "1") return true;
  if (v == "false" || v == "off" || v == "0") return false;
  throw std::invalid_argument(key + ": '" + v + "' is not true or false");
}

template <class Enum>
Enum parse_choice(const std::string& key, const std::string& v, std::initializer_list<const char*> names) {
  int i = 0;
  std::string list;
  for (const char* n : names) {
    if (v == n) return static_cast<Enum>(i);
    list += (list.empty() ? "" : ", ") + std::string(n);
    ++i;
  }
  throw std::invalid_argument(key + ": '" + v + "' is not one of " + list);
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
  std::string key = assignment.substr(0, eq);
  if (key.rfind("parallel.", 0) == 0) key = key.substr(9);
  const std::vector<std::string> values = split(assignment.substr(eq + 1), ',');
  if (values.empty()) throw std::invalid_argument(key + ": no value given");
  auto ints = [&] {
    std::vector<int> v;
    for (const auto& x : values) v.push_back(parse_int(key, x));
    return v;
  };
  auto bools = [&] {
    std::vector<bool> v;
    for (const auto& x : values) v.push_back(parse_bool(key, x));
    return v;
  };
  if (key == "pipeline_parallel_degree") space.pipeline_degrees = ints();
  else if (key == "tensor_parallel_degree") space.tensor_degrees = ints();
  else if (key == "sharded_data_parallel_degree") space.sharded_degrees = ints();
  else if (key == "microbatch_size") space.microbatch_sizes = ints();
  else if (key == "virtual_stages") space.virtual_stages = ints();
  else if (key == "pipeline") {
    space.schedules.clear();
    for (const auto& x : values)
      space.schedules.push_back(parse_choice<PipelineSchedule>(key, x, {"simple", "interleaved"}));
  } else if (key == "placement_strategy") {
    space.placements.clear();
    for (const auto& x : values) {
      const std::string c = Placement::canonical(x);
      if (std::find(placement_names().begin(), placement_names().end(), c) == placement_names().end())
        throw std::invalid_argument(key + ": '" + x + "' is not cluster, spread or a permutation of DPT");
      space.placements.push_back(c);
    }
  } else if (key == "activation_checkpointing") {
    space.checkpointing.clear();
    for (const auto& x : values)
      space.checkpointing.push_back(parse_choice<Checkpointing>(key, x, {"none", "selective", "full"}));
  } else if (key == "checkpointed_layers") {
    space.checkpointed_layers.clear();
    for (const auto& x : values) space.checkpointed_layers.push_back(x == "all" || x == "-1" ? -1 : parse_int(key, x));
  } else if (key == "offload_activations") space.offload_activations = bools();
  else if (key == "shard_optimizer_state") space.shard_optimizer_state = bools();
  else if (key == "flash_attention") space.flash_attention = bools();
  else if (key == "sharded_collective") {
    space.sharded_collectives.clear();
    for (const auto& x : values)
      space.sharded_collectives.push_back(
          parse_choice<CollectiveAlgorithm>(key, x, {"ring", "tree", "hierarchical", "all_to_all"}));
  } else {
    throw std::invalid_argument("'" + key +
                                "' cannot be searched or fixed (keys: pipeline_parallel_degree, "
                                "tensor_parallel_degree, sharded_data_parallel_degree, microbatch_size, pipeline, "
                                "virtual_stages, placement_strategy, activation_checkpointing, offload_activations, "
                                "shard_optimizer_state, flash_attention, sharded_collective, checkpointed_layers)");
  }
}

void pin_from_job(SearchSpace& space, const Job& base, const std::vector<std::string>& keys) {
  const ParallelConfig& pc = base.parallel;
  for (const std::string& key : keys) {
    if (key == "pipeline_parallel_degree") space.pipeline_degrees = {pc.pipeline_parallel_degree};
    else if (key == "tensor_parallel_degree") space.tensor_degrees = {pc.tensor_parallel_degree};
    else if (key == "sharded_data_parallel_degree") space.sharded_degrees = {pc.sharded_data_parallel_degree};
    else if (key == "microbatch_size") space.microbatch_sizes = {base.microbatch_size()};
    else if (key == "pipeline") space.schedules = {pc.pipeline};
    else if (key == "virtual_stages") space.virtual_stages = {pc.virtual_stages};
    else if (key == "placement_strategy") space.placements = {Placement::canonical(pc.placement_strategy)};
    else if (key == "activation_checkpointing") space.checkpointing = {pc.activation_checkpointing};
    else if (key == "offload_activations") space.offload_activations = {pc.offload_activations};
    else if (key == "shard_optimizer_state") space.shard_optimizer_state = {pc.shard_optimizer_state};
    else if (key == "flash_attention") space.flash_attention = {pc.flash_attention};
    else if (key == "sharded_collective") space.sharded_collectives = {pc.sharded_collective};
    else if (key == "checkpointed_layers") space.checkpointed_layers = {pc.checkpointed_layers};
    else throw std::invalid_argument("'" + key + "' cannot be pinned");
  }
}

void apply(const Point& p, Job& job) {
  ParallelConfig& pc = job.parallel;
  pc.pipeline_parallel_degree = p.pipeline;
  pc.tensor_parallel_degree = p.tensor;
  pc.sharded_data_parallel_degree = p.sharded;
  pc.microbatches = p.microbatches;
  pc.virtual_stages = p.virtual_stages;
  pc.pipeline = p.schedule;
  pc.placement_strategy = placement_names()[p.placement];
  pc.activation_checkpointing = p.checkpointing;
  pc.offload_activations = p.offload;
  pc.shard_optimizer_state = p.shard_optimizer;
  pc.flash_attention = p.flash;
  pc.sharded_collective = p.sharded_collective;
  // Layout settings of the base job belong to its own degrees; a point starts uniform
  // (the partitioner may set stages later).
  pc.stage_layers.clear();
  pc.lm_head_stage = LmHeadStage::last;
  pc.checkpointed_layers = p.checkpointing == Checkpointing::none ? -1 : p.checkpointed_layers;
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
                      for (CollectiveAlgorithm algo : algos) {
                        if (sdp == 1 && algo != algos.front()) continue;  // no sharded collectives
                        ++stats.considered;
                        Point p;
                        p.pipeline = pp, p.tensor = tp, p.sharded = sdp;
                        p.microbatch_size = b, p.microbatches = microbatches, p.virtual_stages = v;
                        p.schedule = sched, p.placement = placement, p.checkpointing = ck;
                        p.offload = off, p.shard_optimizer = zero1, p.flash = fa, p.sharded_collective = algo;
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
  const ParallelConfig& pc = job.parallel;
  std::string s = fmt::format("pp{} tp{} dp{}", pc.pipeline_parallel_degree, pc.tensor_parallel_degree,
                              job.data_parallel_degree());
  if (pc.sharded_data_parallel_degree > 1)
    s += fmt::format(" sdp{}({})", pc.sharded_data_parallel_degree, to_string(pc.sharded_collective));
  s += fmt::format(" mb{}x{}", pc.microbatches, job.microbatch_size());
  if (pc.pipeline_parallel_degree > 1)
    s += pc.pipeline == PipelineSchedule::simple ? " gpipe"
         : pc.virtual_stages > 1                 ? fmt::format(" 1f1b-v{}", pc.virtual_stages)
                                                 : " 1f1b";
  s += " " + Placement::canonical(pc.placement_strategy);
  if (pc.activation_checkpointing != Checkpointing::none) {
    s += std::string(" ckpt-") + to_string(pc.activation_checkpointing);
    if (pc.checkpointed_layers >= 0) s += fmt::format("({}/stage)", pc.checkpointed_layers);
  }
  if (!pc.stage_layers.empty()) s += fmt::format(" stages[{}]", fmt::join(pc.stage_layers, ","));
  if (pc.lm_head_stage == LmHeadStage::first) s += " head-on-stage0";
  if (pc.offload_activations) s += " offload";
  if (pc.shard_optimizer_state) s += " zero1";
  if (pc.flash_attention) s += " flash";
  return s;
}

bool matches(const Job& job, const std::vector<std::string>& filters) {
  for (const std::string& f : filters) {
    SearchSpace probe;
    restrict_space(probe, f);  // validates the key and values
    const ParallelConfig& pc = job.parallel;
    auto in = [](const auto& list, auto v) { return list.empty() || std::find(list.begin(), list.end(), v) != list.end(); };
    if (!in(probe.pipeline_degrees, pc.pipeline_parallel_degree) || !in(probe.tensor_degrees, pc.tensor_parallel_degree) ||
        !in(probe.sharded_degrees, pc.sharded_data_parallel_degree) ||
        !in(probe.microbatch_sizes, job.microbatch_size()) || !in(probe.schedules, pc.pipeline) ||
        !in(probe.virtual_stages, pc.virtual_stages) ||
        !in(probe.placements, Placement::canonical(pc.placement_strategy)) ||
        !in(probe.checkpointing, pc.activation_checkpointing) || !in(probe.offload_activations, pc.offload_activations) ||
        !in(probe.shard_optimizer_state, pc.shard_optimizer_state) || !in(probe.flash_attention, pc.flash_attention) ||
        !in(probe.sharded_collectives, pc.sharded_collective) ||
        !in(probe.checkpointed_layers, pc.checkpointed_layers))
      return false;
  }
  return true;
}

}  // namespace partune::search
