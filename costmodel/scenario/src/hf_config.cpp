// A Hugging Face config.json read into a model description (hf_config.hpp). The file is
// JSON, which the YAML reader parses as it is; every refusal names the file, the field and
// the reason.
#include "hf_config.hpp"

#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "scenario_internal.hpp"

namespace partune::detail {

namespace {

// The architectures read, by the first entry of `architectures` (or `model_type`).
enum class Family { llama, mixtral, qwen2, qwen3, qwen3_moe, deepseek, gpt_oss, gpt_neox, gpt2 };

Family family_of(const Reader& r) {
  std::string arch;
  if (r.has("architectures") && r.node()["architectures"].IsSequence() && r.node()["architectures"].size() > 0)
    arch = r.node()["architectures"][0].as<std::string>("");
  else if (r.has("model_type"))
    arch = r.get_string("model_type");
  else
    r.fail("architectures", "missing: a Hugging Face config names its architecture (e.g. LlamaForCausalLM)");
  if (arch == "LlamaForCausalLM" || arch == "MistralForCausalLM" || arch == "llama" || arch == "mistral")
    return Family::llama;
  if (arch == "MixtralForCausalLM" || arch == "mixtral") return Family::mixtral;
  if (arch == "Qwen2ForCausalLM" || arch == "qwen2") return Family::qwen2;
  if (arch == "Qwen3ForCausalLM" || arch == "qwen3") return Family::qwen3;
  if (arch == "Qwen3MoeForCausalLM" || arch == "qwen3_moe") return Family::qwen3_moe;
  if (arch == "DeepseekV3ForCausalLM" || arch == "deepseek_v3" || arch == "DeepseekV2ForCausalLM" ||
      arch == "deepseek_v2")
    return Family::deepseek;
  if (arch == "GptOssForCausalLM" || arch == "gpt_oss") return Family::gpt_oss;
  if (arch == "GPTNeoXForCausalLM" || arch == "gpt_neox") return Family::gpt_neox;
  if (arch == "GPT2LMHeadModel" || arch == "gpt2") return Family::gpt2;
  r.fail("architectures", "'" + arch + "' is not a known architecture (known: LlamaForCausalLM, MistralForCausalLM, "
                                       "MixtralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                                       "DeepseekV2ForCausalLM, DeepseekV3ForCausalLM, GptOssForCausalLM, "
                                       "GPTNeoXForCausalLM, GPT2LMHeadModel)");
}

// LLaMA, Mistral and Qwen2: SwiGLU, RMSNorm, rotary positions, grouped-query attention.
void read_llama(const Reader& r, ModelSpec& m) {
  m.hidden = r.get_int("hidden_size", 1, limits::kMaxHidden);
  m.layers = r.get_int("num_hidden_layers", 1, limits::kMaxLayers);
  m.heads = r.get_int("num_attention_heads", 1, limits::kMaxHidden);
  m.kv_heads = r.get_int("num_key_value_heads", 1, limits::kMaxHidden, m.heads);
  // Mistral-Nemo, Qwen3 and LLaMA-3.1 configs state head_dim; null or absent: hidden / heads.
  if (r.has("head_dim") && !r.node()["head_dim"].IsNull())
    m.attention_head_dim = r.get_int("head_dim", 1, limits::kMaxHidden);
  m.ffn_hidden = r.get_int("intermediate_size", 1, limits::kMaxFfnHidden);
  m.vocab = r.get_int("vocab_size", 1, limits::kMaxVocab);
  m.seq_len = r.get_int("max_position_embeddings", 1, limits::kMaxSeqLen);
  m.tied_embeddings = r.get_bool("tie_word_embeddings", false);
  const std::string act = r.get_string("hidden_act", "silu");
  if (act != "silu" && act != "swish") r.fail("hidden_act", "'" + act + "': this family's MLP is SwiGLU (silu)");
  m.mlp = MlpKind::swiglu;
  m.norm = NormKind::rmsnorm;
  m.positions = PositionKind::rope;
  // Qwen2's Q, K and V have biases (h + 2 kv a layer, under 0.01% of it); the model's
  // `bias` is all the matrices' or none: none, as LLaMA.
  m.bias = false;
  m.dropout = r.get_in_range("attention_dropout", 0, 0.99, 0.0);
}

// Mixtral: Mistral's block with a mixture of experts in every layer, each expert a SwiGLU
// MLP of intermediate_size; dropless routing (capacity factor 1).
void read_mixtral(const Reader& r, ModelSpec& m) {
  read_llama(r, m);
  m.experts = r.get_int("num_local_experts", 2, limits::kMaxExperts);
  m.experts_per_token = r.get_int("num_experts_per_tok", 1, m.experts);
  m.expert_ffn_hidden = m.ffn_hidden;
  m.moe_every = 1;
}

// Qwen3: LLaMA's block with head_dim set apart and QK-norm; attention_bias and sliding
// windows (use_sliding_window) are refused by name, as not modelled.
void read_qwen3(const Reader& r, ModelSpec& m) {
  read_llama(r, m);
  m.qk_norm = true;
  if (r.get_bool("attention_bias", false)) r.fail("attention_bias", "true: biases on QKV alone are not modelled");
  if (r.get_bool("use_sliding_window", false))
    r.fail("use_sliding_window", "true: sliding-window attention is not modelled yet");
}

// Qwen3-MoE: Qwen3's attention with every layer's MLP num_experts SwiGLU experts of
// moe_intermediate_size, num_experts_per_tok a token, no shared expert. Sparse layers other
// than all of them (decoder_sparse_step > 1, mlp_only_layers) are refused by name.
void read_qwen3_moe(const Reader& r, ModelSpec& m) {
  read_qwen3(r, m);
  m.experts = r.get_int("num_experts", 2, limits::kMaxExperts);
  m.experts_per_token = r.get_int("num_experts_per_tok", 1, m.experts);
  m.expert_ffn_hidden = r.get_int("moe_intermediate_size", 1, limits::kMaxFfnHidden);
  m.moe_every = 1;
  if (r.get_int("decoder_sparse_step", 1, limits::kMaxLayers, 1) != 1)
    r.fail("decoder_sparse_step", "only 1 (experts in every layer) is modelled");
  if (r.has("mlp_only_layers") && r.node()["mlp_only_layers"].IsSequence() && r.node()["mlp_only_layers"].size() > 0)
    r.fail("mlp_only_layers", "dense layers among the sparse ones are not modelled: only an empty list");
}

// DeepSeek-V2/V3: multi-head latent attention, the first first_k_dense_replace layers
// dense (SwiGLU of intermediate_size), then every moe_layer_freq-th layer n_routed_experts
// SwiGLU experts of moe_intermediate_size (num_experts_per_tok a token) beside
// n_shared_experts shared ones of the same width; the routing's groups (n_group,
// topk_group) bound the nodes a token reaches; its scoring and correction bias change no
// GEMM and are not read. Multi-token prediction modules
// (num_nextn_predict_layers) are the model's mtp_layers unless the model file leaves them
// out (multi_token_prediction: false).
void read_deepseek(const Reader& r, ModelSpec& m, const HfOptions& options) {
  read_llama(r, m);
  if (r.get_bool("attention_bias", false)) r.fail("attention_bias", "true: attention biases are not modelled");
  m.attention = AttentionKind::mla;
  m.attention_head_dim = 0;  // the latent keys set the heads' widths
  m.kv_heads = m.heads;
  m.q_lora_rank = r.node()["q_lora_rank"].IsNull() ? 0 : r.get_int("q_lora_rank", 0, limits::kMaxHidden, 0);
  m.kv_lora_rank = r.get_int("kv_lora_rank", 1, limits::kMaxHidden);
  m.qk_rope_head_dim = r.get_int("qk_rope_head_dim", 2, limits::kMaxHidden);
  m.qk_nope_head_dim = r.get_int("qk_nope_head_dim", 1, limits::kMaxHidden);
  m.v_head_dim = r.get_int("v_head_dim", 1, limits::kMaxHidden);
  m.experts = r.get_int("n_routed_experts", 2, limits::kMaxExperts);
  m.experts_per_token = r.get_int("num_experts_per_tok", 1, m.experts);
  m.expert_ffn_hidden = r.get_int("moe_intermediate_size", 1, limits::kMaxFfnHidden);
  m.shared_expert_ffn_hidden = r.get_int("n_shared_experts", 0, limits::kMaxExperts, 0) * m.expert_ffn_hidden;
  m.first_dense_layers = r.get_int("first_k_dense_replace", 0, limits::kMaxLayers, 0);
  m.moe_every = r.get_int("moe_layer_freq", 1, limits::kMaxLayers, 1);
  parse_router_groups(r, m, "n_group", "topk_group");
  const int mtp = r.get_int("num_nextn_predict_layers", 0, limits::kMaxLayers, 0);
  m.mtp_layers = options.without_mtp ? 0 : mtp;
}

// gpt-oss: LLaMA's block with head_dim, biases on every matrix (attention_bias: QKV, the
// output and the experts'), attention sinks, experts in every layer (num_local_experts of
// intermediate_size, num_experts_per_tok a token), and sliding windows in the layers
// layer_types marks sliding_attention: a period with the full layers last (gpt-oss:
// alternating), or every layer. Its SwiGLU clamp (swiglu_limit) changes no GEMM.
void read_gpt_oss(const Reader& r, ModelSpec& m) {
  read_llama(r, m);
  m.bias = r.get_bool("attention_bias", true);
  m.attention_sinks = true;
  m.experts = r.get_int("num_local_experts", 2, limits::kMaxExperts);
  m.experts_per_token = r.get_int("num_experts_per_tok", 1, m.experts);
  m.expert_ffn_hidden = m.ffn_hidden;
  m.moe_every = 1;
  if (!r.has("sliding_window") || r.node()["sliding_window"].IsNull()) return;
  m.sliding_window = r.get_int("sliding_window", 1, limits::kMaxSeqLen);
  const YAML::Node types = r.node()["layer_types"];
  if (!types.IsDefined() || !types.IsSequence()) return;  // every layer windowed
  std::vector<bool> full;
  for (const auto& t : types) full.push_back(t.as<std::string>("") == "full_attention");
  int period = 0;
  for (std::size_t i = 0; i < full.size() && period == 0; ++i)
    if (full[i]) period = static_cast<int>(i) + 1;
  m.full_attention_every = period;
  const ModelSpec probe = m;
  for (std::size_t i = 0; i < full.size(); ++i)
    if (probe.is_full_attention_layer(static_cast<int>(i)) != full[i])
      r.fail("layer_types", "layer " + std::to_string(i) + " breaks the pattern of full layers every " +
                                std::to_string(period) + " (only a period with the full layers last is modelled)");
}

// GPT-NeoX: LayerNorm, rotary positions, biases, GeLU (4h), untied.
void read_gpt_neox(const Reader& r, ModelSpec& m) {
  m.hidden = r.get_int("hidden_size", 1, limits::kMaxHidden);
  m.layers = r.get_int("num_hidden_layers", 1, limits::kMaxLayers);
  m.heads = r.get_int("num_attention_heads", 1, limits::kMaxHidden);
  m.kv_heads = m.heads;
  m.ffn_hidden = r.get_int("intermediate_size", 1, limits::kMaxFfnHidden, 4 * m.hidden);
  m.vocab = r.get_int("vocab_size", 1, limits::kMaxVocab);
  m.seq_len = r.get_int("max_position_embeddings", 1, limits::kMaxSeqLen);
  m.tied_embeddings = r.get_bool("tie_word_embeddings", false);
  m.positions = PositionKind::rope;
  m.dropout = r.get_in_range("hidden_dropout", 0, 0.99, 0.0);
}

// GPT-2: learned positions, LayerNorm, biases, GeLU (n_inner or 4h), tied.
void read_gpt2(const Reader& r, ModelSpec& m) {
  m.hidden = r.get_int("n_embd", 1, limits::kMaxHidden);
  m.layers = r.get_int("n_layer", 1, limits::kMaxLayers);
  m.heads = r.get_int("n_head", 1, limits::kMaxHidden);
  m.kv_heads = m.heads;
  m.ffn_hidden = r.get_int("n_inner", 1, limits::kMaxFfnHidden, 4 * m.hidden);
  m.vocab = r.get_int("vocab_size", 1, limits::kMaxVocab);
  m.seq_len = r.get_int("n_positions", 1, limits::kMaxSeqLen);
  m.tied_embeddings = r.get_bool("tie_word_embeddings", true);
  m.dropout = r.get_in_range("resid_pdrop", 0, 0.99, 0.1);
}

// A Hugging Face cache snapshot: models--ORG--NAME/snapshots/<commit>/config.json.
bool is_commit(const std::string& s) {
  if (s.size() != 40) return false;
  for (char ch : s)
    if (!std::isxdigit(static_cast<unsigned char>(ch))) return false;
  return true;
}

}  // namespace

std::string hf_model_name(const std::string& name_or_path, const std::string& config_path,
                          const std::string& model_type) {
  namespace fs = std::filesystem;
  if (!name_or_path.empty()) {
    const bool local = name_or_path[0] == '/' || name_or_path[0] == '.' || name_or_path[0] == '~';
    if (!local) return name_or_path;  // a Hub id, e.g. meta-llama/Meta-Llama-3-8B
    fs::path p = fs::path(name_or_path).lexically_normal();
    if (!p.has_filename()) p = p.parent_path();  // a trailing '/'
    const std::string base = p.filename().string();
    if (!base.empty() && base != "." && base != "..") return base;
  }
  const fs::path file(config_path);
  if (file.stem() != "config" && !file.stem().empty()) return file.stem().string();
  const fs::path folder = fs::absolute(file).lexically_normal().parent_path();
  const fs::path above = folder.parent_path();
  const std::string repo = above.parent_path().filename().string();
  if (is_commit(folder.filename().string()) && above.filename() == "snapshots" && repo.rfind("models--", 0) == 0) {
    std::string id = repo.substr(8);
    const std::size_t sep = id.find("--");
    if (sep != std::string::npos) id.replace(sep, 2, "/");
    return id;
  }
  if (!folder.filename().empty()) return folder.filename().string();
  return model_type.empty() ? "hf-model" : model_type;
}

ModelSpec model_from_hf_config(const std::string& path, const HfOptions& options) {
  const Reader r(load_yaml_file(path), path, "");
  if (!r.node().IsMap()) throw ScenarioError(path, "", "a Hugging Face config.json must be a JSON object");
  const Family f = family_of(r);
  ModelSpec m;
  m.name = hf_model_name(r.get_string("_name_or_path", ""), path, r.get_string("model_type", ""));
  switch (f) {
    case Family::llama:
    case Family::qwen2: read_llama(r, m); break;
    case Family::mixtral: read_mixtral(r, m); break;
    case Family::qwen3: read_qwen3(r, m); break;
    case Family::qwen3_moe: read_qwen3_moe(r, m); break;
    case Family::deepseek: read_deepseek(r, m, options); break;
    case Family::gpt_oss: read_gpt_oss(r, m); break;
    case Family::gpt_neox: read_gpt_neox(r, m); break;
    case Family::gpt2: read_gpt2(r, m); break;
  }
  if (m.attention_head_dim == 0 && m.hidden % m.heads != 0 && !m.is_mla())
    r.fail(f == Family::gpt2 ? "n_head" : "num_attention_heads",
           std::to_string(m.heads) + " does not divide the hidden size " + std::to_string(m.hidden));
  if (m.is_mla()) return m;  // every head its own keys and values
  if (m.heads % m.kv_heads != 0)
    r.fail("num_key_value_heads", std::to_string(m.kv_heads) + " does not divide the heads " + std::to_string(m.heads));
  m.attention = m.kv_heads == m.heads ? AttentionKind::mha : m.kv_heads == 1 ? AttentionKind::mqa : AttentionKind::gqa;
  return m;
}

}  // namespace partune::detail
