// partune bench attention [--seq-lens 512,1024,...] [--head-dim 64] [--heads 2] [--batch 1]
//                         [--repeats 3] [--full] [--json]
// Standard attention against FlashAttention, forward + backward: time and peak tensor
// memory per sequence length (kernels/attention_bench.hpp). Runs in build/partune-run
// (LibTorch), with the backend's allocator accounting for the peaks.
#include <unistd.h>

#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "option_checks.hpp"
#include "partune/backend/memory_accounting.hpp"
#include "partune/kernels/attention_bench.hpp"
#include "progress.hpp"

namespace partune::cli {

namespace {

nlohmann::json rows_json(const std::vector<kernels::AttentionBenchRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    nlohmann::json j = {{"seq_len", r.seq_len},
                        {"flash_s", r.flash.seconds},
                        {"flash_range_s", {r.flash.min_s, r.flash.max_s}},
                        {"flash_peak_bytes", r.flash.peak_bytes}};
    if (r.standard) {
      j["standard_s"] = r.standard->seconds;
      j["standard_range_s"] = {r.standard->min_s, r.standard->max_s};
      j["standard_peak_bytes"] = r.standard->peak_bytes;
    } else {
      j["standard_s"] = nullptr;
      j["standard_peak_bytes"] = nullptr;
      j["standard_skipped"] = r.standard_skipped;
    }
    out.push_back(j);
  }
  return out;
}

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1 << 20)); }

void print_table(const kernels::AttentionBenchOptions& o, const std::vector<kernels::AttentionBenchRow>& rows) {
  std::cout << fmt::format("attention forward + backward, batch {} x {} heads, head dim {}, {}, fp32, {} LibTorch "
                           "thread(s); time: 20th percentile of {} interleaved runs [min..max]; memory: peak tensor "
                           "bytes above the inputs\n",
                           o.batch, o.heads, o.head_dim, o.causal ? "causal" : "no mask",
                           kernels::attention_bench_threads(o), o.repeats);
  std::cout << fmt::format("{:>7}  {:>26}  {:>26}  {:>7}  {:>12}  {:>12}  {:>7}\n", "seq", "standard", "flash",
                           "speedup", "standard mem", "flash mem", "ratio");
  for (const auto& r : rows) {
    const std::string flash = fmt::format("{:.4f} s [{:.4f}..{:.4f}]", r.flash.seconds, r.flash.min_s, r.flash.max_s);
    if (!r.standard) {
      std::cout << fmt::format("{:>7}  {:>26}  {:>26}  {:>7}  {:>12}  {:>12}  {:>7}\n", r.seq_len, "skipped", flash, "",
                               "", mib(static_cast<double>(r.flash.peak_bytes)), "");
      std::cout << fmt::format("{:>9}standard skipped: {}\n", "", r.standard_skipped);
      continue;
    }
    const auto& s = *r.standard;
    std::cout << fmt::format("{:>7}  {:>26}  {:>26}  {:>6.2f}x  {:>12}  {:>12}  {:>6.1f}x\n", r.seq_len,
                             fmt::format("{:.4f} s [{:.4f}..{:.4f}]", s.seconds, s.min_s, s.max_s), flash,
                             s.seconds / r.flash.seconds, mib(static_cast<double>(s.peak_bytes)),
                             mib(static_cast<double>(r.flash.peak_bytes)),
                             static_cast<double>(s.peak_bytes) / static_cast<double>(std::max<std::int64_t>(1, r.flash.peak_bytes)));
  }
}

}  // namespace

void register_bench_attention(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Speed benchmarks that need LibTorch");
  bench->require_subcommand(1);
  auto* cmd = bench->add_subcommand(
      "attention", "Standard attention vs FlashAttention, forward + backward: time and peak memory by sequence length");
  auto opt = std::make_shared<kernels::AttentionBenchOptions>();
  auto json = std::make_shared<bool>(false);
  auto no_mask = std::make_shared<bool>(false);
  cmd->add_option("--seq-lens", opt->seq_lens, "sequence lengths")->delimiter(',')->capture_default_str();
  cmd->add_option("--head-dim", opt->head_dim, "head size")->capture_default_str()->check(count_in(1, 1024));
  cmd->add_option("--heads", opt->heads, "heads")->capture_default_str()->check(count_in(1, 1024));
  cmd->add_option("--batch", opt->batch, "sequences")->capture_default_str()->check(count_in(1, 1024));
  cmd->add_option("--repeats", opt->repeats, "interleaved runs of each kernel per length")
      ->capture_default_str()
      ->check(count_in(1, 1000));
  cmd->add_option("--threads", opt->threads, "LibTorch intra-op threads (default: LibTorch's own default)")
      ->check(count_in(1, 1024));
  cmd->add_flag("--no-mask", *no_mask, "attend to every key (default: causal)");
  cmd->add_flag("--json", *json,
                "print {\"rows\":[{\"seq_len\",\"standard_s\",\"flash_s\",\"standard_peak_bytes\",\"flash_peak_bytes\",...}]}");
  cmd->callback([opt, json, no_mask] {
    kernels::AttentionBenchOptions o = *opt;
    o.causal = !*no_mask;
    o.bytes = {backend::cpu_tensor_bytes_in_use, backend::cpu_tensor_bytes_peak, backend::reset_cpu_tensor_bytes_peak};
    if (::isatty(STDERR_FILENO))
      o.progress = [](int done, int total, const std::string&) { progress_bar(done, total, "attention runs"); };
    std::vector<kernels::AttentionBenchRow> rows;
    try {
      rows = kernels::attention_bench(o);
    } catch (const std::invalid_argument& e) {
      std::cerr << "partune: error: " << e.what() << "\n";
      throw Exit{2};
    }
    if (o.progress) std::cerr << "\r\033[K" << std::flush;
    if (*json) {
      std::cout << nlohmann::json({{"threads", kernels::attention_bench_threads(o)}, {"rows", rows_json(rows)}}).dump(2)
                << "\n";
    } else {
      print_table(o, rows);
    }
  });
}

}  // namespace partune::cli
