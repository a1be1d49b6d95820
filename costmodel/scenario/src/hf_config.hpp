#pragma once
// `model: {from_hf: PATH}`: a Hugging Face config.json read into a ModelSpec. Known
// architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (SwiGLU, RMSNorm,
// rotary, grouped-query), MixtralForCausalLM (the same block with a mixture of experts),
// GPTNeoXForCausalLM (LayerNorm, rotary, biases, GeLU) and GPT2LMHeadModel (learned
// positions, tied). The sequence is max_position_embeddings (n_positions) unless the model
// file sets seq_len beside from_hf. Throws ScenarioError naming the file and the field (an
// unknown architecture, a missing or bad field). docs/scenarios.md lists the keys read.
#include <string>

#include "partune/costmodel/model.hpp"

namespace partune::detail {

// What the model file says beside from_hf about parts of a config to leave out:
// without_mtp reads a config with multi-token prediction modules (DeepSeek-V3's
// num_nextn_predict_layers) as the model without them (otherwise they are its mtp_layers).
struct HfOptions {
  bool without_mtp = false;
};
ModelSpec model_from_hf_config(const std::string& path, const HfOptions& options = {});

// The name of the model in `config_path` (a `name:` beside from_hf overrides it):
//   1. `_name_or_path` as written when it is a Hub id (meta-llama/Meta-Llama-3-8B), its
//      last component when it is a local path (starts with '/', '.' or '~');
//   2. the file's stem when the file is not called config.json (llama-2-7b.json);
//   3. the Hub cache's repository for .../models--ORG--NAME/snapshots/<commit>/config.json
//      (ORG/NAME);
//   4. the folder holding config.json (.../llama-3-8b/config.json: llama-3-8b);
//   5. `model_type`, or "hf-model" without one.
std::string hf_model_name(const std::string& name_or_path, const std::string& config_path,
                          const std::string& model_type);

}  // namespace partune::detail
