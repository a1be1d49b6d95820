#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/pipeline_layout.hpp"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <new>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "partune/costmodel/enum_names.hpp"
#include "partune/costmodel/units.hpp"
#include "hf_config.hpp"
#include "scenario_internal.hpp"
#include "yaml_reader.hpp"

namespace partune {

using detail::Reader;
namespace fs = std::filesystem;

std::string scenario_root() {
  if (const char* env = std::getenv("PARTUNE_SCENARIOS"); env && *env) return env;
  return PARTUNE_SCENARIO_DIR;
}

std::vector<std::string> list_presets(const std::string& kind) {
  std::vector<std::string> names;
  const fs::path dir = fs::path(scenario_root()) / kind;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".yaml") names.push_back(it->path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}


namespace detail {

namespace {
bool looks_like_path(const std::string& s) {
  auto ends_with = [&](const char* suffix) {
    const std::string x(suffix);
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  return s.find('/') != std::string::npos || ends_with(".yaml") || ends_with(".yml");
}

// Why `ref` cannot be a preset name or a path ("" when it can), checked before any
// file-system call: a preset name is letters, digits, '.', '-' and '_'; a path is one
// only when it looks like one (looks_like_path).
std::string bad_reference(const std::string& ref) {
  if (ref.empty()) return "an empty name";
  for (const char c : ref)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "a name with control characters";
  if (looks_like_path(ref)) return ref.size() > 4096 ? "a path longer than 4096 characters" : "";
  if (ref.size() > 200) return "a preset name longer than 200 characters";
  if (ref[0] == '.') return "'" + ref + "' is not a preset name (it starts with '.')";
  for (const char c : ref)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
      return "'" + ref + "' is not a preset name (letters, digits, '.', '-' and '_'; a path contains '/')";
  return "";
}

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}
}  // namespace

Resolved resolve_reference(const YAML::Node& value, const std::string& file, const std::string& key,
                           const std::string& preset_kind) {
  auto load_ref = [&](const std::string& ref) -> Resolved {
    if (const std::string why = bad_reference(ref); !why.empty()) throw ScenarioError(file, key, why);
    std::string path;
    if (looks_like_path(ref)) {
      path = resolve_path(file, ref);
    } else {
      path = scenario_root() + "/" + preset_kind + "/" + ref + ".yaml";
      if (!exists(path)) {
        std::string known;
        for (const auto& n : list_presets(preset_kind)) known += (known.empty() ? "" : ", ") + n;
        throw ScenarioError(file, key, "no preset '" + ref + "' in " + scenario_root() + "/" +
                                           preset_kind + " (known: " + known + ")");
      }
    }
    if (!exists(path)) throw ScenarioError(file, key, "file '" + path + "' does not exist");
    YAML::Node node;
    try {
      node = load_yaml_file(path);
    } catch (const ScenarioError& e) {
      // The referenced file is refused: say which key of which file pointed at it.
      throw ScenarioError(file, key, e.what());
    }
    // A file may itself start from another (`base:` at its top, relative to it): a chain
    // of at most kMaxBaseDepth files, so that a cycle is an error, not a hang.
    if (!node.IsMap() || !node["base"].IsDefined()) return {node, path, ""};
    static thread_local int depth = 0;
    constexpr int kMaxBaseDepth = 8;
    if (depth >= kMaxBaseDepth)
      throw ScenarioError(path, "base", "a chain of more than 8 base: files (a cycle?)");
    ++depth;
    try {
      Resolved r = resolve_reference(node, path, "", preset_kind);
      --depth;
      return r;
    } catch (...) {
      --depth;
      throw;
    }
  };
  if (value.IsScalar()) return load_ref(value.as<std::string>());
  if (!value.IsMap()) throw ScenarioError(file, key, "expected a preset name, a file path or a mapping");
  if (value["base"].IsDefined()) {
    if (!value["base"].IsScalar()) throw ScenarioError(file, key + ".base", "expected a preset name or path");
    Resolved base = load_ref(value["base"].as<std::string>());
    YAML::Node over = YAML::Clone(value);
    over.remove("base");
    // Errors now name the referencing file: the merged keys may come from either.
    return {deep_merge(base.node, over), file, key};
  }
  return {value, file, key};
}

namespace {

// `from_hf: PATH` (relative to the file that says it): a Hugging Face config.json, with
// name, seq_len and dropout allowed beside it to override what it says.
ModelSpec parse_hf_model(const Reader& r) {
  r.allow_only(
      {"kind", "name", "description", "source", "from_hf", "seq_len", "dropout", "multi_token_prediction",
       "mtp_layers", "expert_load_skew"});
  const std::string path = resolve_path(r.file(), r.get_string("from_hf"));
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) r.fail("from_hf", "'" + path + "' is not a readable file");
  if (r.has("multi_token_prediction") && r.has("mtp_layers"))
    r.fail("mtp_layers", "says what multi_token_prediction says: keep one of them");
  const bool mtp = r.get_bool("multi_token_prediction", true);
  detail::HfOptions options;
  options.without_mtp = !mtp;
  ModelSpec m = model_from_hf_config(path, options);
  if (mtp && r.has("multi_token_prediction") && !m.has_mtp())
    r.fail("multi_token_prediction", "true: the config has no multi-token prediction modules (num_nextn_predict_layers)");
  m.mtp_layers = r.get_int("mtp_layers", 0, limits::kMaxLayers, m.mtp_layers);
  m.name = r.get_string("name", m.name);
  m.seq_len = r.get_int("seq_len", 1, limits::kMaxSeqLen, m.seq_len);
  m.dropout = r.get_in_range("dropout", 0, 0.99, m.dropout);
  if (r.has("expert_load_skew")) {
    if (!m.is_moe()) r.fail("expert_load_skew", "applies to a mixture of experts: the config has no experts");
    m.expert_load_skew = r.get_in_range("expert_load_skew", 0.0, 4.0, 0.0);
  }
  return m;
}

}  // namespace

// Mixture of experts: `experts` > 1 turns it on; the other keys need it.
void parse_experts(const Reader& r, ModelSpec& m) {
  m.experts = r.get_int("experts", 0, limits::kMaxExperts, 0);
  if (m.experts == 1) r.fail("experts", "one expert is a dense MLP: use 0 (no experts) or 2 and more");
  if (m.experts == 0) {
    for (const char* key : {"experts_per_token", "moe_every", "expert_ffn_hidden", "capacity_factor",
                            "shared_expert_ffn_hidden", "first_dense_layers", "expert_load_skew", "router_groups",
                            "router_group_topk"})
      if (r.has(key)) r.fail(key, "applies to a mixture of experts: set model.experts");
    return;
  }
  m.experts_per_token = r.get_int("experts_per_token", 1, m.experts, std::min(2, m.experts));
  m.moe_every = r.get_int("moe_every", 1, limits::kMaxLayers, 1);
  m.expert_ffn_hidden = r.get_int("expert_ffn_hidden", 1, limits::kMaxFfnHidden, m.ffn_hidden);
  m.capacity_factor = r.get_in_range("capacity_factor", 1.0, 16.0, 1.0);
  m.shared_expert_ffn_hidden = r.get_int("shared_expert_ffn_hidden", 0, limits::kMaxFfnHidden, 0);
  m.first_dense_layers = r.get_int("first_dense_layers", 0, limits::kMaxLayers, 0);
  m.expert_load_skew = r.get_in_range("expert_load_skew", 0.0, 4.0, 0.0);
  parse_router_groups(r, m, "router_groups", "router_group_topk");
}

void parse_router_groups(const Reader& r, ModelSpec& m, const char* groups_key, const char* topk_key) {
  if (!r.has(groups_key) && !r.has(topk_key)) return;
  if (!r.has(groups_key) || !r.has(topk_key))
    r.fail(r.has(groups_key) ? topk_key : groups_key, fmt::format("group-limited routing needs both {} and {}",
                                                                  groups_key, topk_key));
  m.router_groups = r.get_int(groups_key, 1, m.experts);
  m.router_group_topk = r.get_int(topk_key, 1, m.router_groups);
  if (m.experts % m.router_groups != 0)
    r.fail(groups_key, fmt::format("{} groups do not split the {} experts evenly", m.router_groups, m.experts));
  if (m.router_group_topk * (m.experts / m.router_groups) < m.experts_per_token)
    r.fail(topk_key, fmt::format("{} groups of {} experts hold fewer than the {} experts a token picks",
                                 m.router_group_topk, m.experts / m.router_groups, m.experts_per_token));
}

// attention: mla (DeepSeek-V2/V3): every head has its own keys and values (kv_heads =
// heads), rebuilt from the latents; heads need not divide hidden; positions are rotary
// (the rotary part of each query and key).
void parse_latent_attention(const Reader& r, ModelSpec& m) {
  for (const char* key : {"kv_heads", "head_dim"})
    if (r.has(key)) r.fail(key, "multi-head latent attention sets it: every head has its own keys and values "
                                "(qk_nope_head_dim + qk_rope_head_dim wide)");
  m.kv_heads = m.heads;
  m.q_lora_rank = r.get_int("q_lora_rank", 0, limits::kMaxHidden, 0);
  m.kv_lora_rank = r.get_int("kv_lora_rank", 1, limits::kMaxHidden);
  m.qk_rope_head_dim = r.get_int("qk_rope_head_dim", 2, limits::kMaxHidden);
  m.qk_nope_head_dim = r.get_int("qk_nope_head_dim", 1, limits::kMaxHidden);
  m.v_head_dim = r.get_int("v_head_dim", 1, limits::kMaxHidden);
  if (m.qk_rope_head_dim % 2 != 0) r.fail("qk_rope_head_dim", "rotary positions rotate pairs: must be even");
  if (m.positions != PositionKind::rope)
    r.fail("positions", "multi-head latent attention rotates qk_rope_head_dim of each query and key: must be rope");
}

ModelSpec parse_model(const Reader& r) {
  // Checked first: a model file's `kind` is `model` with or without `from_hf`.
  if (r.has("kind") && r.get_string("kind") != "model") r.fail("kind", "expected 'model'");
  if (r.has("from_hf")) return parse_hf_model(r);
  r.allow_only({"kind", "name", "description", "source", "layers", "hidden", "heads", "kv_heads", "head_dim", "qk_norm", "sliding_window",
                "full_attention_every", "attention_sinks", "q_lora_rank",
                "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
                "ffn_hidden", "vocab", "seq_len", "tied_embeddings", "attention", "dropout", "mlp", "norm",
                "positions", "bias", "experts", "experts_per_token", "moe_every", "expert_ffn_hidden",
                "shared_expert_ffn_hidden", "first_dense_layers",
                "capacity_factor", "expert_load_skew", "router_groups", "router_group_topk", "mtp_layers"});
  ModelSpec m;
  m.name = r.get_string("name", "model");
  m.layers = r.get_int("layers", 1, limits::kMaxLayers);
  m.hidden = r.get_int("hidden", 1, limits::kMaxHidden);
  m.heads = r.get_int("heads", 1, limits::kMaxHidden);
  m.vocab = r.get_int("vocab", 1, limits::kMaxVocab);
  m.seq_len = r.get_int("seq_len", 1, limits::kMaxSeqLen);
  m.ffn_hidden = r.get_int("ffn_hidden", 1, limits::kMaxFfnHidden, 4 * m.hidden);
  m.tied_embeddings = r.get_bool("tied_embeddings", true);
  m.dropout = r.get_in_range("dropout", 0, 0.99, m.dropout);
  m.attention = get_enum(r, "attention", AttentionKind::mha);
  m.mlp = get_enum(r, "mlp", MlpKind::gelu);
  m.norm = get_enum(r, "norm", NormKind::layernorm);
  m.positions = get_enum(r, "positions", PositionKind::learned);
  m.bias = r.get_bool("bias", true);
  m.qk_norm = r.get_bool("qk_norm", false);
  m.sliding_window = r.get_int("sliding_window", 0, limits::kMaxSeqLen, 0);
  m.full_attention_every = r.get_int("full_attention_every", 0, limits::kMaxLayers, 0);
  if (m.full_attention_every > 0 && m.sliding_window == 0)
    r.fail("full_attention_every", "applies to sliding-window attention: set model.sliding_window");
  m.attention_sinks = r.get_bool("attention_sinks", false);
  parse_experts(r, m);
  m.mtp_layers = r.get_int("mtp_layers", 0, limits::kMaxLayers, 0);
  // A head's width: hidden / heads unless `head_dim` sets it apart (then heads need not
  // divide hidden: Qwen3-0.6B has 16 heads of 128 over a hidden size of 1024).
  m.attention_head_dim = r.get_int("head_dim", 1, limits::kMaxHidden, 0);
  if (m.attention_head_dim == 0 && m.hidden % m.heads != 0 && m.attention != AttentionKind::mla)
    r.fail("heads", std::to_string(m.heads) + " does not divide hidden " + std::to_string(m.hidden) +
                        " (set head_dim for heads of another width)");
  switch (m.attention) {
    case AttentionKind::mha:
      m.kv_heads = r.get_int("kv_heads", 1, limits::kMaxHidden, m.heads);
      if (m.kv_heads != m.heads) r.fail("kv_heads", "must equal heads for attention: mha");
      break;
    case AttentionKind::mqa:
      m.kv_heads = r.get_int("kv_heads", 1, limits::kMaxHidden, 1);
      if (m.kv_heads != 1) r.fail("kv_heads", "must be 1 for attention: mqa");
      break;
    case AttentionKind::gqa:
      m.kv_heads = r.get_int("kv_heads", 1, limits::kMaxHidden);
      if (m.heads % m.kv_heads != 0)
        r.fail("kv_heads", "must divide heads (" + std::to_string(m.heads) + ")");
      break;
    case AttentionKind::mla: parse_latent_attention(r, m); break;
  }
  if (m.attention != AttentionKind::mla)
    for (const char* key : {"q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"})
      if (r.has(key)) r.fail(key, "applies to multi-head latent attention: set model.attention: mla");
  return m;
}


namespace {

// The value of a --set, parsed and expanded as a file's would be; an error names the --set.
YAML::Node override_value(const std::string& value, const std::string& assignment, const std::string& origin) {
  const std::string key = "--set " + assignment;
  YAML::Node node;
  try {
    node = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw ScenarioError(origin, key, "the value is not valid YAML (" + e.msg + ")");
  }
  try {
    return expand_merge_keys(node, origin, "");
  } catch (const ScenarioError& e) {
    throw ScenarioError(origin, key, e.reason());
  }
}

// The section and key an override "section.key=value" (or "key=value") sets; the section
// empty for a whole entry (model, name).
std::pair<std::string, std::string> override_target(const std::string& assignment) {
  std::string key = assignment.substr(0, assignment.find('='));
  if (key == "model" || key == "name") return {"", key};
  if (const auto dot = key.find('.'); dot != std::string::npos) return {key.substr(0, dot), key.substr(dot + 1)};
  static const char* training_keys[] = {"global_batch",   "precision",     "optimizer",      "gradient_accumulation",
                                        "loss_precision", "kernel_fusion", "optimizer_impl", "cuda_graphs",
                                        "attention_impl", "fp8_recipe",    "moment_precision"};
  static const char* cluster_keys[] = {"nodes", "oversubscription", "instance_type", "collective_stack",
                                       "nccl_protocol", "domain_nodes"};
  std::string section = "parallel";
  for (const char* k : training_keys) if (key == k) section = "training";
  for (const char* k : cluster_keys) if (key == k) section = "cluster";
  return {section, key};
}

// Splits "section.key=value" (or "key=value") and writes it into the job's YAML.
void apply_override(YAML::Node& root, const std::string& assignment, const std::string& origin) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ScenarioError(origin, assignment, "an override must look like key=value");
  const std::string value = assignment.substr(eq + 1);
  const auto [section, key] = override_target(assignment);
  if (section.empty()) {
    // Whole-entry replacement: a different model preset/path, or the job's name.
    root[key] = override_value(value, assignment, origin);
    return;
  }
  if (section != "parallel" && section != "training" && section != "cluster" && section != "model")
    throw ScenarioError(origin, assignment, "overrides apply to parallel, training, cluster or model keys");
  YAML::Node sec = root[section];
  if (sec.IsDefined() && sec.IsScalar()) {
    // A referenced model/cluster: override on top of the reference.
    YAML::Node m;
    m["base"] = sec.as<std::string>();
    root[section] = m;
  }
  root[section][key] = override_value(value, assignment, origin);
}

}  // namespace

// A section of `key: value` or `key: [v1, v2]` as "key=v1,v2" each. With `any_value`, a
// value may be a mapping or a list (an override's value: an instance type with `base:`),
// written in YAML's flow style.
std::vector<std::string> key_value_lists(const Reader& sr, bool any_value) {
  std::vector<std::string> out;
  if (!sr.node().IsMap()) sr.fail("", "expected a mapping of keys to values or lists of values");
  auto text = [&](const std::string& key, const YAML::Node& v) {
    if (v.IsScalar()) return v.as<std::string>();
    if (!any_value) sr.fail(key, "expected a value or a list of values");
    YAML::Emitter e;
    e << YAML::Flow << v;
    return std::string(e.c_str());
  };
  for (const auto& kv : sr.node()) {
    const std::string key = kv.first.as<std::string>();
    std::string values;
    if (kv.second.IsSequence()) {
      for (const auto& v : kv.second) values += (values.empty() ? "" : ",") + text(key, v);
    } else {
      values = text(key, kv.second);
    }
    if (values.empty()) sr.fail(key, "no value given");
    out.push_back(key + "=" + values);
  }
  return out;
}

Job parse_job_node(YAML::Node root, const std::string& file, const std::string& key_prefix, JobRules rules) {
  const Reader r(root, file, key_prefix);
  r.allow_only({"kind", "name", "description", "model", "cluster", "training", "parallel", "search", "sweep"});
  if (r.has("kind") && r.get_string("kind") != "job") r.fail("kind", "expected 'job'");
  Job job;
  job.name = r.get_string("name", fs::path(file).stem().string());
  if (!r.has("model")) r.fail("model", "missing");
  const Resolved model = resolve_reference(root["model"], file, r.key_path("model"), "models");
  job.model = parse_model(Reader(model.node, model.file, model.key));
  if (!r.has("cluster")) r.fail("cluster", "missing");
  // A cluster is a file of kind cluster (by path), or a mapping (optionally with base:).
  const Resolved c = resolve_reference(root["cluster"], file, r.key_path("cluster"), "clusters");
  if (c.node.IsMap() && c.node["kind"].IsDefined() && c.node["kind"].IsScalar() &&
      c.node["kind"].as<std::string>() == "instance_type") {
    const YAML::Node given = root["cluster"];
    const std::string name = given.IsScalar() ? given.as<std::string>()
                             : given["base"].IsScalar() ? given["base"].as<std::string>() : "this";
    r.fail("cluster", "'" + name + "' is an instance type, not a cluster: write cluster: {instance_type: " + name +
                          ", nodes: N}");
  }
  job.cluster = parse_cluster(Reader(c.node, c.file, c.key));
  parse_training(r.child("training"), job.training);
  // Kept as text "key=v1,v2": search/ validates the keys and values where it uses them
  // (the search space; the sweep's overrides).
  if (r.has("search")) job.search_restrictions = key_value_lists(r.child("search"), false);
  if (r.has("sweep")) job.sweep_axes = key_value_lists(r.child("sweep"), true);
  if (r.has("parallel")) parse_parallel(r.child("parallel"), job.parallel);
  if (r.has("parallel") && r.child("parallel").has("data_parallel_degree")) {
    const int given = r.child("parallel").get_int("data_parallel_degree", 1, limits::kMaxRanks);
    if (rules == JobRules::every && given != job.data_parallel_degree())  // else the search derives it anew
      r.child("parallel").fail("data_parallel_degree",
                               "is derived (GPUs / (pp * tp * cp) = " + std::to_string(job.data_parallel_degree()) +
                                   "); the file says " + std::to_string(given));
  }
  if (const JobViolation v = check_job(job, rules))
    throw ScenarioError(file, key_prefix.empty() ? v.key : key_prefix + "." + v.key, v.reason);
  return job;
}

}  // namespace detail

namespace {
// Every exception that leaves the loader is a ScenarioError naming the file: anything
// else (a file-system or yaml-cpp error, memory) is turned into one here.
template <typename F>
auto refusing_other_errors(const std::string& file, F&& load) -> decltype(load()) {
  try {
    return load();
  } catch (const ScenarioError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw ScenarioError(file, "", "out of memory while reading it");
  } catch (const std::exception& e) {
    throw ScenarioError(file, "", e.what());
  }
}
}  // namespace

InstanceType load_instance_type(const std::string& name_or_path) {
  return refusing_other_errors("<command line>", [&] {
    const detail::Resolved r = detail::resolve_reference(YAML::Node(name_or_path), "<command line>",
                                                         "instance_type", "clusters");
    return detail::parse_instance_type(Reader(r.node, r.file, r.key));
  });
}

ModelSpec load_model(const std::string& name_or_path) {
  return refusing_other_errors("<command line>", [&] {
    const detail::Resolved r = detail::resolve_reference(YAML::Node(name_or_path), "<command line>", "model",
                                                         "models");
    return detail::parse_model(Reader(r.node, r.file, r.key));
  });
}

namespace {

// The job with its overrides applied; an error at a key an override set (or beneath it)
// names the override ("--set KEY=VALUE") rather than the file, whose text it is not.
Job parse_overridden(YAML::Node root, const std::string& origin, const std::vector<std::string>& overrides,
                     JobRules rules) {
  if (!root.IsMap()) throw ScenarioError(origin, "", "a job file must be a mapping");
  for (const auto& o : overrides) detail::apply_override(root, o, origin);
  try {
    return detail::parse_job_node(root, origin, "", rules);
  } catch (const ScenarioError& e) {
    for (auto it = overrides.rbegin(); it != overrides.rend(); ++it) {
      const auto [section, key] = detail::override_target(*it);
      const std::string path = section.empty() ? key : section + "." + key;
      if (e.file() == origin && (e.key() == path || e.key().rfind(path + ".", 0) == 0))
        throw ScenarioError("--set " + *it, e.key(), e.reason());
    }
    throw;
  }
}

}  // namespace

Job parse_job(const std::string& yaml_text, const std::string& origin,
              const std::vector<std::string>& overrides, JobRules rules) {
  return refusing_other_errors(origin, [&] {
    return parse_overridden(detail::parse_yaml_text(yaml_text, origin), origin, overrides, rules);
  });
}

Job load_job(const std::string& path, const std::vector<std::string>& overrides, JobRules rules) {
  return refusing_other_errors(path, [&] {
    return parse_overridden(detail::load_yaml_file(path), path, overrides, rules);
  });
}

}  // namespace partune
