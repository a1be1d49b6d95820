#pragma once
// Megatron-Core's pipeline layout string (--pipeline-model-parallel-layout,
// megatron/core/transformer/pipeline_parallel_layer_layout.py): the model chunks in model
// order separated by '|', each a run of symbols: 'E' the embedding, 't' a transformer
// layer, 'm' a multi-token-prediction layer, 'L' the loss (the output head); a symbol or a
// parenthesised group may be repeated with '*N'. "Et|(tt|)*30mL" is 32 chunks: the
// embedding and one layer, thirty chunks of two layers, the MTP layer and the loss.
#include <string>
#include <vector>

namespace partune {

struct PipelineLayout {
  std::vector<int> chunk_layers;  // transformer layers of each chunk, in model order
  int mtp_layers = 0;             // 'm' symbols (all in the last chunk)
};

// Parses and checks a layout: 'E' once, in the first chunk; 'L' once, in the last; 'm'
// only in the last chunk. Throws std::invalid_argument with the reason.
PipelineLayout parse_pipeline_layout(const std::string& text);

}  // namespace partune
