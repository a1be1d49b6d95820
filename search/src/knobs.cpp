#include "partune/search/knobs.hpp"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

#include "partune/costmodel/placement.hpp"
#include "partune/search/space.hpp"

namespace partune::search {

namespace {

int parse_positive(const std::string& key, const std::string& v) {
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

// An enum value by its to_string() name, trying every value below `count`.
template <class Enum>
Enum parse_enum(const std::string& key, const std::string& v, int count) {
  std::string list;
  for (int i = 0; i < count; ++i) {
    const Enum e = static_cast<Enum>(i);
    if (v == to_string(e)) return e;
    list += (list.empty() ? "" : ", ") + std::string(to_string(e));
  }
  throw std::invalid_argument(key + ": '" + v + "' is not one of " + list);
}

PlacementOrder parse_placement(const std::string& key, const std::string& v) {
  try {
    return PlacementOrder::parse(v);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(key + ": '" + v + "' is not cluster, spread or a permutation of DPT");
  }
}

int parse_layers(const std::string& key, const std::string& v) {
  return v == "all" || v == "-1" ? -1 : parse_positive(key, v);
}

std::string text_of(int v) { return std::to_string(v); }
std::string text_of(bool v) { return v ? "true" : "false"; }
std::string text_of(PlacementOrder v) { return v.name(); }
template <class Enum, class = std::enable_if_t<std::is_enum_v<Enum>>>
std::string text_of(Enum e) {
  return to_string(e);
}

// One knob from its list in the space and four functions on plain values: parse one
// value, read the job's value, write the point's value, describe the job.
template <class T, class Parse, class Get, class Apply, class Show>
Knob make_knob(const char* key, std::vector<T> SearchSpace::*list, Parse parse, Get of_job, Apply apply, Show show) {
  Knob k;
  k.key = key;
  k.restrict = [key, list, parse](SearchSpace& s, const std::vector<std::string>& values) {
    std::vector<T> parsed;
    for (const std::string& v : values) parsed.push_back(parse(key, v));
    s.*list = std::move(parsed);
  };
  k.pin = [list, of_job](SearchSpace& s, const Job& job) { s.*list = std::vector<T>{of_job(job)}; };
  k.allows = [list, of_job](const SearchSpace& s, const Job& job) {
    const std::vector<T>& allowed = s.*list;
    return allowed.empty() || std::find(allowed.begin(), allowed.end(), of_job(job)) != allowed.end();
  };
  k.value = [of_job](const Job& job) { return text_of(of_job(job)); };
  k.apply = apply;
  k.describe = show;
  return k;
}

std::string flag(bool on, const char* word) { return on ? std::string(" ") + word : std::string(); }

using S = SearchSpace;
using J = const Job&;
using P = const Point&;

// Context parallelism: its degree and how the context ranks exchange keys and values.
void add_context_knobs(std::vector<Knob>& k) {
  k.push_back(make_knob(
      "context_parallel_degree", &S::context_degrees, parse_positive,
      [](J j) { return j.parallel.context_parallel_degree; },
      [](P p, Job& j) { j.parallel.context_parallel_degree = p.context; },
      [](J j) {
        const int cp = j.parallel.context_parallel_degree;
        return cp > 1 ? fmt::format(" cp{}", cp) : std::string();
      }));
  k.push_back(make_knob(
      "cp_comm_type", &S::context_comms,
      [](const std::string& key, const std::string& v) { return parse_enum<ContextComm>(key, v, 4); },
      [](J j) { return j.parallel.cp_comm_type; }, [](P p, Job& j) { j.parallel.cp_comm_type = p.context_comm; },
      [](J j) {
        return j.parallel.context_parallel_degree > 1 ? fmt::format("({})", to_string(j.parallel.cp_comm_type))
                                                      : std::string();
      }));
}

// How the work is split: degrees, micro-batches, schedule, placement.
void add_split_knobs(std::vector<Knob>& k) {
  k.push_back(make_knob(
      "pipeline_parallel_degree", &S::pipeline_degrees, parse_positive,
      [](J j) { return j.parallel.pipeline_parallel_degree; },
      [](P p, Job& j) { j.parallel.pipeline_parallel_degree = p.pipeline; },
      [](J j) { return fmt::format("pp{}", j.parallel.pipeline_parallel_degree); }));
  k.push_back(make_knob(
      "tensor_parallel_degree", &S::tensor_degrees, parse_positive, [](J j) { return j.parallel.tensor_parallel_degree; },
      [](P p, Job& j) { j.parallel.tensor_parallel_degree = p.tensor; },
      // The data-parallel degree is what the two model-parallel degrees leave.
      [](J j) { return fmt::format(" tp{} dp{}", j.parallel.tensor_parallel_degree, j.data_parallel_degree()); }));
  add_context_knobs(k);
  k.push_back(make_knob(
      "sharded_data_parallel_degree", &S::sharded_degrees, parse_positive,
      [](J j) { return j.parallel.sharded_data_parallel_degree; },
      [](P p, Job& j) { j.parallel.sharded_data_parallel_degree = p.sharded; },
      [](J j) {
        const int sdp = j.parallel.sharded_data_parallel_degree;
        return sdp > 1 ? fmt::format(" sdp{}", sdp) : std::string();
      }));
  k.push_back(make_knob(
      "expert_parallel_degree", &S::expert_degrees, parse_positive,
      [](J j) { return j.parallel.expert_parallel_degree; },
      [](P p, Job& j) { j.parallel.expert_parallel_degree = p.expert; },
      [](J j) {
        const int ep = j.parallel.expert_parallel_degree;
        return ep > 1 ? fmt::format(" ep{}", ep) : std::string();
      }));
  k.push_back(make_knob(
      "expert_tensor_parallel_degree", &S::expert_tensor_degrees, parse_positive,
      [](J j) { return j.expert_tensor_degree(); },
      // The tensor degree is written as 0 (unset), which a dense model's job rules require.
      [](P p, Job& j) { j.parallel.expert_tensor_parallel_degree = p.expert_tensor == p.tensor ? 0 : p.expert_tensor; },
      [](J j) {
        const int etp = j.expert_tensor_degree();
        return etp != std::max(1, j.parallel.tensor_parallel_degree) ? fmt::format(" etp{}", etp) : std::string();
      }));
  k.push_back(make_knob(
      "sharded_collective", &S::sharded_collectives,
      [](const std::string& key, const std::string& v) { return parse_enum<CollectiveAlgorithm>(key, v, 5); },
      [](J j) { return j.parallel.sharded_collective; },
      [](P p, Job& j) { j.parallel.sharded_collective = p.sharded_collective; },
      [](J j) {
        return j.parallel.sharded_data_parallel_degree > 1
                   ? fmt::format("({})", to_string(j.parallel.sharded_collective))
                   : std::string();
      }));
  k.push_back(make_knob(
      "microbatch_size", &S::microbatch_sizes, parse_positive, [](J j) { return j.microbatch_size(); },
      // The point carries the micro-batch count its size gives (batch / (dp x size)).
      [](P p, Job& j) { j.parallel.microbatches = p.microbatches; },
      [](J j) { return fmt::format(" mb{}x{}", j.parallel.microbatches, j.microbatch_size()); }));
  k.push_back(make_knob(
      "pipeline", &S::schedules,
      [](const std::string& key, const std::string& v) { return parse_enum<PipelineSchedule>(key, v, 5); },
      [](J j) { return j.parallel.pipeline; }, [](P p, Job& j) { j.parallel.pipeline = p.schedule; },
      [](J j) {
        if (j.parallel.pipeline_parallel_degree <= 1) return std::string();
        const PipelineSchedule sc = j.parallel.pipeline;
        if (sc == PipelineSchedule::gpipe) return std::string(" gpipe");
        if (sc == PipelineSchedule::one_f_one_b) return std::string(" 1f1b");
        return " " + std::string(to_string(sc));
      }));
  k.push_back(make_knob(
      "virtual_stages", &S::virtual_stages, parse_positive, [](J j) { return j.parallel.virtual_stages; },
      [](P p, Job& j) { j.parallel.virtual_stages = p.virtual_stages; },
      [](J j) {
        const ParallelConfig& pc = j.parallel;
        const bool shown = pc.pipeline_parallel_degree > 1 && pc.pipeline == PipelineSchedule::one_f_one_b &&
                           pc.virtual_stages > 1;
        return shown ? fmt::format("-v{}", pc.virtual_stages) : std::string();
      }));
  k.push_back(make_knob(
      "placement_strategy", &S::placements, parse_placement,
      [](J j) { return j.parallel.placement_strategy; },
      [](P p, Job& j) { j.parallel.placement_strategy = p.placement; },
      [](J j) { return " " + j.parallel.placement_strategy.name(); }));
}

// What each GPU keeps and how it computes: checkpointing, offload, ZeRO-1, kernels.
void add_memory_knobs(std::vector<Knob>& k) {
  k.push_back(make_knob(
      "activation_checkpointing", &S::checkpointing,
      [](const std::string& key, const std::string& v) { return parse_enum<Checkpointing>(key, v, 3); },
      [](J j) { return j.parallel.activation_checkpointing; },
      [](P p, Job& j) { j.parallel.activation_checkpointing = p.checkpointing; },
      [](J j) {
        const Checkpointing c = j.parallel.activation_checkpointing;
        return c == Checkpointing::none ? std::string() : std::string(" ckpt-") + to_string(c);
      }));
  k.push_back(make_knob(
      "checkpointed_layers", &S::checkpointed_layers, parse_layers, [](J j) { return j.parallel.checkpointed_layers; },
      [](P p, Job& j) {
        j.parallel.checkpointed_layers = p.checkpointing == Checkpointing::none ? -1 : p.checkpointed_layers;
      },
      [](J j) {
        const ParallelConfig& pc = j.parallel;
        const bool shown = pc.activation_checkpointing != Checkpointing::none && pc.checkpointed_layers >= 0;
        return shown ? fmt::format("({}/stage)", pc.checkpointed_layers) : std::string();
      }));
  k.push_back(make_knob(
      "offload_activations", &S::offload_activations, parse_bool, [](J j) { return j.parallel.offload_activations; },
      [](P p, Job& j) { j.parallel.offload_activations = p.offload; },
      [](J j) { return flag(j.parallel.offload_activations, "offload"); }));
  k.push_back(make_knob(
      "offload_optimizer", &S::offload_optimizer, parse_bool, [](J j) { return j.parallel.offload_optimizer; },
      [](P p, Job& j) { j.parallel.offload_optimizer = p.offload_optimizer; },
      [](J j) { return flag(j.parallel.offload_optimizer, "offload-opt"); }));
  k.push_back(make_knob(
      "offload_parameters", &S::offload_parameters, parse_bool, [](J j) { return j.parallel.offload_parameters; },
      [](P p, Job& j) { j.parallel.offload_parameters = p.offload_parameters; },
      [](J j) { return flag(j.parallel.offload_parameters, "offload-params"); }));
  k.push_back(make_knob(
      "shard_optimizer_state", &S::shard_optimizer_state, parse_bool,
      [](J j) { return j.parallel.shard_optimizer_state; },
      [](P p, Job& j) { j.parallel.shard_optimizer_state = p.shard_optimizer; },
      [](J j) { return flag(j.parallel.shard_optimizer_state && !j.parallel.shard_gradients, "zero1"); }));
  k.push_back(make_knob(
      "shard_gradients", &S::shard_gradients, parse_bool, [](J j) { return j.parallel.shard_gradients; },
      [](P p, Job& j) { j.parallel.shard_gradients = p.shard_gradients; },
      [](J j) { return flag(j.parallel.shard_gradients, "zero2"); }));
  k.push_back(make_knob(
      "flash_attention", &S::flash_attention, parse_bool, [](J j) { return j.parallel.flash_attention; },
      [](P p, Job& j) { j.parallel.flash_attention = p.flash; },
      [](J j) { return flag(j.parallel.flash_attention, "flash"); }));
  k.push_back(make_knob(
      "sequence_parallel", &S::sequence_parallel, parse_bool, [](J j) { return j.parallel.sequence_parallel; },
      [](P p, Job& j) { j.parallel.sequence_parallel = p.sequence_parallel; },
      [](J j) { return flag(j.parallel.sequence_parallel, "sp"); }));
}

std::vector<Knob> make_knobs() {
  std::vector<Knob> k;
  add_split_knobs(k);
  add_memory_knobs(k);
  return k;
}

}  // namespace

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = make_knobs();
  return table;
}

std::string knob_keys() {
  std::string keys;
  for (const Knob& k : knobs()) keys += (keys.empty() ? "" : ", ") + std::string(k.key);
  return keys;
}

const Knob& knob(const std::string& key) {
  const std::string bare = key.rfind("parallel.", 0) == 0 ? key.substr(9) : key;
  for (const Knob& k : knobs())
    if (bare == k.key) return k;
  throw std::invalid_argument("'" + bare + "' cannot be searched or fixed (keys: " + knob_keys() + ")");
}

}  // namespace partune::search
