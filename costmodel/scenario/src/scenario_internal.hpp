#pragma once
// Shared between scenario.cpp and table.cpp (tables embed jobs).
#include <yaml-cpp/yaml.h>

#include <string>

#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/job_rules.hpp"
#include "yaml_reader.hpp"

namespace partune::detail {

// The ranges the loader allows (docs/scenarios.md, "Ranges"). They keep every product
// of job sizes inside an int: GPUs = nodes x gpus_per_node <= 2^26; a rank's program
// counts a chunk's layers in 16 bits (layers <= 32767) and its micro-batches
// (microbatches x gradient_accumulation <= 2^28) in 32; virtual stages x micro-batches
// <= 2^26.
namespace limits {
constexpr long long kMaxNodes = 65536;
constexpr long long kMaxGpusPerNode = 1024;
constexpr long long kMaxRanks = kMaxNodes * kMaxGpusPerNode;
constexpr long long kMaxHostCores = 1 << 20;
constexpr long long kMaxLayers = 32767;
constexpr long long kMaxHidden = 1 << 20;
constexpr long long kMaxFfnHidden = 1 << 22;
constexpr long long kMaxVocab = 1 << 24;
constexpr long long kMaxExperts = 1 << 16;
constexpr long long kMaxSeqLen = 1 << 24;
constexpr long long kMaxGlobalBatch = 2147483647;
constexpr long long kMaxGradientAccumulation = 4096;
constexpr long long kMaxMicrobatches = 65536;
constexpr long long kMaxVirtualStages = 1024;
constexpr double kMaxOversubscription = 1000;
}  // namespace limits

// A value that is a preset name, a path, or an inline mapping (optionally with
// `base:` naming a preset/path it overrides), resolved to one YAML mapping plus where
// errors about it should point.
struct Resolved {
  YAML::Node node;
  std::string file;
  std::string key;  // key prefix inside `file` ("" for a whole referenced file)
};
Resolved resolve_reference(const YAML::Node& value, const std::string& file, const std::string& key,
                           const std::string& preset_kind);

// The value of `key` by its name in E's one table (enum_names.hpp); `fallback` when absent.
template <typename E>
E get_enum(const Reader& r, const std::string& key, E fallback) {
  if (!r.has(key)) return fallback;
  const std::string v = r.get_string(key);
  if (const auto e = enum_value<E>(v)) return *e;
  r.fail(key, "'" + v + "' is not one of: " + enum_name_list<E>());
}

ModelSpec parse_model(const Reader& r);
// Group-limited routing read from `groups_key` and `topk_key` (the model file's
// router_groups / router_group_topk, or HF's n_group / topk_group): both or neither; the
// groups divide the experts and a token's groups hold its experts_per_token.
void parse_router_groups(const Reader& r, ModelSpec& m, const char* groups_key, const char* topk_key);
// The job's training and parallel sections (job_sections.cpp).
void parse_training(const Reader& r, TrainingConfig& t);
void parse_parallel(const Reader& r, ParallelConfig& p);
// `collective_stack`: one of the file's collective_stacks to use instead of its
// collectives (empty: the collectives).
InstanceType parse_instance_type(const Reader& r, const std::string& collective_stack = "");
Cluster parse_cluster(const Reader& r);
Job parse_job_node(YAML::Node root, const std::string& file, const std::string& key_prefix,
                   JobRules rules = JobRules::every);

}  // namespace partune::detail
