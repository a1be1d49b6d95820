#pragma once
// `model: {from_hf: PATH}`: a Hugging Face config.json read into a ModelSpec. Known
// architectures: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (SwiGLU, RMSNorm,
// rotary, grouped-query), GPTNeoXForCausalLM (LayerNorm, rotary, biases, GeLU) and
// GPT2LMHeadModel (learned positions, tied). The sequence is max_position_embeddings
// (n_positions) unless the model file sets seq_len beside from_hf. Throws ScenarioError
// naming the file and the field (an unknown architecture, a missing or bad field; a
// mixture of experts is refused: not modelled yet).
#include <string>

#include "partune/costmodel/model.hpp"

namespace partune::detail {

ModelSpec model_from_hf_config(const std::string& path);

}  // namespace partune::detail
