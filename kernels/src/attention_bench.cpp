// Standard attention against FlashAttention, forward + backward (attention_bench.hpp).
#include "partune/kernels/attention_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include <fmt/format.h>
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "partune/costmodel/quantile.hpp"
#include "partune/kernels/flash_attention.hpp"

namespace partune::kernels {

namespace {

struct Inputs {
  torch::Tensor q, k, v, grad;
};

Inputs make_inputs(const AttentionBenchOptions& o, int seq) {
  torch::manual_seed(seq);
  const std::vector<std::int64_t> shape{o.batch, o.heads, seq, o.head_dim};
  return {torch::randn(shape), torch::randn(shape), torch::randn(shape), torch::randn(shape)};
}

// One forward + backward; returns its seconds and sets `peak` to the extra tensor bytes.
double time_once(const Inputs& in, bool flash, bool causal, const TensorBytes& bytes, std::int64_t& peak) {
  torch::Tensor q = in.q.clone().requires_grad_(), k = in.k.clone().requires_grad_(), v = in.v.clone().requires_grad_();
  const std::int64_t before = bytes.in_use ? bytes.in_use() : 0;
  if (bytes.reset_peak) bytes.reset_peak();
  const auto start = std::chrono::steady_clock::now();
  {
    torch::Tensor out = flash ? flash_attention(q, k, v, causal) : standard_attention(q, k, v, causal);
    out.backward(in.grad);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  peak = bytes.peak ? bytes.peak() - before : 0;
  return s;
}

KernelTiming summarize(const std::vector<double>& times, std::int64_t peak) {
  KernelTiming t;
  t.seconds = quantile(times, kLowQuantile);
  t.min_s = *std::min_element(times.begin(), times.end());
  t.max_s = *std::max_element(times.begin(), times.end());
  t.peak_bytes = peak;
  return t;
}

double physical_memory_bytes() {
  return static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGE_SIZE));
}

void check_options(const AttentionBenchOptions& o) {
  const auto fail = [](const std::string& why) { throw std::invalid_argument("bench attention: " + why); };
  if (o.seq_lens.empty()) fail("--seq-lens is empty");
  for (int s : o.seq_lens)
    if (s < 1 || s > 1 << 20) fail(fmt::format("--seq-lens: {} is outside [1, 1048576]", s));
  if (o.batch < 1 || o.batch > 1024) fail("--batch must be in [1, 1024]");
  if (o.heads < 1 || o.heads > 1024) fail("--heads must be in [1, 1024]");
  if (o.head_dim < 1 || o.head_dim > 1024) fail("--head-dim must be in [1, 1024]");
  if (o.repeats < 1 || o.repeats > 1000) fail("--repeats must be in [1, 1000]");
  if (o.threads < 0 || o.threads > 1024) fail("--threads must be in [1, 1024]");
}

}  // namespace

double standard_attention_peak_estimate(int batch, int heads, int seq_len) {
  return 5.0 * batch * heads * static_cast<double>(seq_len) * seq_len * sizeof(float);
}

int attention_bench_threads(const AttentionBenchOptions& o) {
  return o.threads > 0 ? o.threads : at::get_num_threads();
}

std::vector<AttentionBenchRow> attention_bench(const AttentionBenchOptions& o) {
  check_options(o);
  if (o.threads > 0) at::set_num_threads(o.threads);
  const double limit = o.standard_memory_limit > 0 ? o.standard_memory_limit : 0.6 * physical_memory_bytes();
  std::vector<AttentionBenchRow> rows;
  const int total = static_cast<int>(o.seq_lens.size()) * o.repeats;
  int done = 0;
  for (int seq : o.seq_lens) {
    AttentionBenchRow row;
    row.seq_len = seq;
    const double need = standard_attention_peak_estimate(o.batch, o.heads, seq);
    const bool run_standard = need <= limit;
    if (!run_standard)
      row.standard_skipped = fmt::format("needs about {:.1f} GiB (limit {:.1f} GiB)", need / (1 << 30), limit / (1 << 30));
    const Inputs in = make_inputs(o, seq);
    std::vector<double> standard_times, flash_times;
    std::int64_t standard_peak = 0, flash_peak = 0;
    for (int r = 0; r < o.repeats; ++r) {
      if (o.progress) o.progress(done++, total, fmt::format("seq {}", seq));
      std::int64_t peak = 0;
      if (run_standard) {
        standard_times.push_back(time_once(in, false, o.causal, o.bytes, peak));
        if (r == 0) standard_peak = peak;
      }
      flash_times.push_back(time_once(in, true, o.causal, o.bytes, peak));
      if (r == 0) flash_peak = peak;
    }
    if (run_standard) row.standard = summarize(standard_times, standard_peak);
    row.flash = summarize(flash_times, flash_peak);
    rows.push_back(row);
  }
  if (o.progress) o.progress(total, total, "done");
  return rows;
}

}  // namespace partune::kernels
