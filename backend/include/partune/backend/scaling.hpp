#pragma once
// The model-size scaling rule: the backend runs the job's program on a model small
// enough for this machine. The job file is not changed; `partune run --scale-*` flags
// give explicit sizes. No LibTorch here.
#include <string>

#include "partune/costmodel/job.hpp"

namespace partune::backend {

// Explicit sizes; 0 = decided by the rule below.
struct ScaleOptions {
  int layers = 0;
  int hidden = 0;
  int heads = 0;
  int seq_len = 0;
  int vocab = 0;
};

// The sizes the backend runs.
struct BackendModelConfig {
  int layers = 2;
  int hidden = 64;
  int heads = 4;
  int ffn_hidden = 256;  // 4 * hidden unless the job's model is kept as it is
  int vocab = 256;
  int seq_len = 32;
  bool tied_embeddings = true;
  bool flash_attention = false;  // the job's parallel.flash_attention: the attention kernel
  int head_dim() const { return hidden / heads; }
  long long parameters() const;  // exact count of the model the backend builds
};

// A model is small enough to run as it is when it has at most this many parameters and a
// sequence of at most kSmallSeqLen tokens.
constexpr double kSmallModelParams = 10e6;
constexpr int kSmallSeqLen = 1024;

// The rule: every size given in `scale` wins. The others keep the job's values when the
// model is small (above), else take the defaults: 2 layers, hidden 64, 4 heads, sequence
// 32, vocabulary 256. ffn_hidden is the job's when hidden is the job's, else 4 * hidden;
// heads default to the job's when they divide the hidden size and the model is kept, else
// 4 (or the largest divisor of hidden <= 4). Grouped-query / multi-query attention runs as
// multi-head attention. Tied embeddings follow the job. Throws std::invalid_argument
// for sizes that cannot work (heads not dividing hidden, values < 1).
BackendModelConfig scaled_model(const ModelSpec& model, const ScaleOptions& scale);
// The job's model by the rule, with the job's choice of attention kernel.
BackendModelConfig scaled_model(const Job& job, const ScaleOptions& scale);

// The job with its model replaced by `config` (same name suffixed "-scaled" when any size
// changed), so that build_program and the batch arithmetic see the sizes that run. The
// block is the GPT block the backend builds: a LLaMA-style model (swiglu, rmsnorm, rope,
// no biases) runs, and is predicted, as that block at its sizes.
Job scaled_job(const Job& job, const BackendModelConfig& config);

// "2 layers, hidden 64, 4 heads (head dim 16), ffn 256, vocab 256, seq 32, tied, 0.11M parameters"
std::string describe(const BackendModelConfig& config);

}  // namespace partune::backend
