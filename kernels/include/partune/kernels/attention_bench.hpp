#pragma once
// `partune bench attention`: time and peak memory of standard attention against
// FlashAttention (flash_attention.hpp), forward + backward, over sequence lengths at a
// fixed head size. Each length runs both kernels `repeats` times, interleaved (standard,
// flash, standard, flash ...), and reports the 20th percentile of each one's times
// (costmodel/quantile.hpp) with their spread; the peak is the tensor bytes allocated
// above those in use before the call, as the caller's allocator accounting counts them
// (backend/memory_accounting.hpp). No LibTorch in this header.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace partune::kernels {

// The caller's account of tensor bytes (the backend's allocator wrapper).
struct TensorBytes {
  std::function<std::int64_t()> in_use;
  std::function<std::int64_t()> peak;
  std::function<void()> reset_peak;
};

struct AttentionBenchOptions {
  std::vector<int> seq_lens{512, 1024, 2048, 4096, 8192, 16384};
  int batch = 1, heads = 2, head_dim = 64;
  int repeats = 3;
  int threads = 0;  // LibTorch intra-op threads; 0: LibTorch's default
  bool causal = true;
  // The standard path is skipped at a length whose s x s tensors (an estimate of its
  // peak) would take more than this many bytes; 0: 60% of the physical memory.
  double standard_memory_limit = 0;
  TensorBytes bytes;
  std::function<void(int done, int total, const std::string& what)> progress;
};

struct KernelTiming {
  double seconds = 0;                // 20th percentile of the repeats
  double min_s = 0, max_s = 0;       // their spread
  std::int64_t peak_bytes = 0;       // extra tensor bytes at the peak (first repeat)
};

struct AttentionBenchRow {
  int seq_len = 0;
  std::optional<KernelTiming> standard;  // absent when skipped for memory
  KernelTiming flash;
  std::string standard_skipped;          // why, when skipped
};

// Throws std::invalid_argument for options out of range (named).
std::vector<AttentionBenchRow> attention_bench(const AttentionBenchOptions& options);

// The LibTorch intra-op threads the bench runs with under these options.
int attention_bench_threads(const AttentionBenchOptions& options);

// The standard path's estimated peak bytes at this size: the s x s tensors it holds at
// once (scores, mask result, probabilities, their gradients: 5 of them) in fp32.
double standard_attention_peak_estimate(int batch, int heads, int seq_len);

}  // namespace partune::kernels
