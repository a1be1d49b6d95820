#pragma once
// The scaled job: the job as the LibTorch backend runs it, its model small enough for this
// machine by the model-size scaling rule below. The job file is not changed; `partune run
// --scale-*` flags give explicit sizes. Pure (no LibTorch): `partune validate` simulates
// exactly the job `partune run` runs, from this code.
#include <string>

#include "partune/costmodel/job.hpp"

namespace partune {

// Explicit sizes; 0 = decided by the rule below.
struct ScaleOptions {
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int seq_len = 0;
  int vocab = 0;
  // The job's model as it is, whatever its size (`run --scale-whole`, or a GPU run:
  // --device cuda), the sizes given above still winning.
  bool whole = false;
};

// A model is small enough to run as it is when it has at most this many parameters and a
// sequence of at most kSmallSeqLen tokens.
constexpr double kSmallModelParams = 10e6;
constexpr int kSmallSeqLen = 1024;

// The rule: every size given in `scale` wins. The others keep the job's values when the
// model is small (above), else take the defaults: 2 layers, hidden 64, 4 heads, sequence
// 32, vocabulary 256. ffn_hidden is the job's when hidden is the job's, else 4 * hidden
// (for SwiGLU too: its fc1 then holds 8 * hidden columns); heads default to the job's
// when they divide the hidden size and the model is kept, else 4 (or the largest divisor
// of hidden <= 4). The block keeps the job's variants (mlp, norm, positions, bias,
// attention). Key/value heads: all the heads for mha, 1 for mqa; for gqa the job's when
// its heads are kept, else the job's share of the heads (kv_heads / heads) of the new
// heads, at least `min_kv_heads` (scaled_job: the tensor-parallel degree, which splits
// them), rounded up to a divisor of the heads. Tied embeddings follow the job. The name
// is the model's, suffixed "-scaled" when any size changed.
// Throws std::invalid_argument for sizes that cannot work (heads not dividing hidden,
// values < 1, an odd head dim with rotary positions).
ModelSpec scaled_model(const ModelSpec& model, const ScaleOptions& scale, int min_kv_heads = 1);

// The job as the backend runs it: its model by the rule (min_kv_heads: its tensor-parallel
// degree), so that build_program, the batch arithmetic and the backend's model all see
// the sizes that run. Its sharding keeps no tensor whole (param_persistence_threshold 0):
// the backend gathers every sharded layer, as the program it runs then says.
Job scaled_job(const Job& job, const ScaleOptions& scale);

// "2 layers, hidden 64, 4 heads (head dim 16), ffn 256, vocab 256, seq 32, tied embeddings,
// 0.119M parameters"; a block other than GPT's names what differs after the sizes:
// "..., seq 32, swiglu, rmsnorm, rope, gqa 2 kv heads, no bias, tied embeddings, ...";
// ", flash attention" at the end when the job's attention kernel is FlashAttention.
std::string describe_model(const ModelSpec& model, bool flash_attention = false);

// What runs against the job's model, and why, in one line (the first `partune run`
// prints): "runs a scaled-down gpt2-small: 2 layers, hidden 64, seq 32, 0.119M parameters
// (124M as written), because ..."; "runs gpt2-small as written: ..." when no size changed;
// "runs gpt2-small resized by --scale-*: ..." when `scale` gave sizes.
std::string describe_scaling(const ModelSpec& model, const ModelSpec& ran, const ScaleOptions& scale);

}  // namespace partune
