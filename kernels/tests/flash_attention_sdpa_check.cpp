// flash_attention_sdpa_check: partune's CUDA FlashAttention, reached the way the rest of
// partune reaches it (partune::kernels::flash_attention, the autograd function of
// flash_attention.hpp, which hands CUDA tensors to the kernels of flash_attention_cuda.hpp),
// against LibTorch's at::scaled_dot_product_attention (SDPA: FlashAttention-2, cuDNN or
// memory-efficient attention, whichever LibTorch picks), both judged against a float32
// reference, and both timed.
//
//   flash_attention_sdpa_check [--quick] [--budget SECONDS] [--json FILE]
//
// Cases: bf16 and fp16, head_dim 64 and 128, causal and not, [batch, heads, seq] in
// {4,16,512} {4,16,1024} {3,12,1000 (not a multiple of any tile)} {2,16,2048} {2,8,4096};
// --quick: bf16 over {2,8,512} {2,8,1000} {2,8,2048} and fp16 over {2,8,1000} only.
// Both take q, k, v as [batch, heads, seq, head_dim] (flash_attention.hpp and SDPA agree;
// partune makes them contiguous [batch*heads, seq, head_dim] for its kernels, which is
// the same memory), scale 1/sqrt(head_dim), causal = key j hidden from query i when j > i
// (SDPA's is_causal: top-left aligned, the same for square attention). Inputs and the
// output gradient dout are N(0, 1), rounded to the element type.
//
// Accuracy (max abs and relative error against a float32 reference), the pass criterion
// (err_partune <= 2 err_sdpa + u max|ref|), the interleaved timing and the FLOP counts:
// flash_attention_sdpa_check.md beside this file.
//
// Output: one line per case and a summary; --json FILE writes every figure.
// Exit status: 0 every accuracy check passed, 1 one failed (or a case threw), 2 bad
// arguments, 77 nothing to check (no CUDA device visible to LibTorch, or a LibTorch older
// than 2.0, which has no scaled_dot_product_attention): ctest's SKIP_RETURN_CODE.
#include <cuda_runtime_api.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partune/kernels/flash_attention.hpp"

#if TORCH_VERSION_MAJOR >= 2
#define PARTUNE_HAVE_SDPA 1
#else
#define PARTUNE_HAVE_SDPA 0
#endif

namespace {

constexpr int kExitPass = 0, kExitFail = 1, kExitUsage = 2, kExitSkip = 77;
constexpr double kSdpaErrorFactor = 2.0;               // the pass criterion (flash_attention_sdpa_check.md)
constexpr std::int64_t kReferenceChunkBytes = 256LL << 20;  // one s x s fp32 block of heads
constexpr std::uint64_t kSeed = 20240611;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// ---- arguments ----

struct Options {
  bool quick = false;
  double budget_s = -1;  // < 0: the mode's default
  std::string json_path;
};

void usage(std::FILE* to) {
  std::fprintf(to,
               "usage: flash_attention_sdpa_check [--quick] [--budget SECONDS] [--json FILE]\n"
               "  partune's CUDA FlashAttention vs LibTorch's scaled_dot_product_attention:\n"
               "  accuracy against a float32 reference and forward+backward time.\n"
               "  --quick           fewer, smaller cases (under ~20 s on an H100)\n"
               "  --budget SECONDS  time for all timing repeats (default 60, --quick 6)\n"
               "  --json FILE       write every figure to FILE\n"
               "exit: 0 pass, 1 an accuracy check failed, 2 bad arguments, 77 skipped\n");
}

// 0: parsed; 1: --help (exit 0); -1: bad arguments.
int parse_arguments(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const std::string& name, std::string& out) {
      if (a == name) {
        if (i + 1 >= argc) return false;
        out = argv[++i];
        return true;
      }
      out = a.substr(name.size() + 1);  // --name=value
      return true;
    };
    std::string v;
    if (a == "--help" || a == "-h") return 1;
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--json" || a.rfind("--json=", 0) == 0) {
      if (!value("--json", v) || v.empty()) return -1;
      o.json_path = v;
    } else if (a == "--budget" || a.rfind("--budget=", 0) == 0) {
      if (!value("--budget", v)) return -1;
      char* end = nullptr;
      o.budget_s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !std::isfinite(o.budget_s) || o.budget_s < 0) return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

// ---- cases ----

struct Case {
  torch::ScalarType dtype;
  bool causal;
  std::int64_t head_dim, batch, heads, seq;
};

const char* dtype_name(torch::ScalarType t) { return t == torch::kBFloat16 ? "bf16" : "fp16"; }

// Unit roundoff of the element type: bf16 keeps 8 significant bits, fp16 11.
double unit_roundoff(torch::ScalarType t) { return t == torch::kBFloat16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

// The comment at the top of the file: 14 b h s^2 d, halved when causal.
double fwd_bwd_flops(const Case& c) {
  const double f = 14.0 * double(c.batch) * double(c.heads) * double(c.seq) * double(c.seq) * double(c.head_dim);
  return c.causal ? f / 2 : f;
}

std::vector<Case> make_cases(bool quick) {
  struct Shape {
    std::int64_t batch, heads, seq;
  };
  std::vector<Case> cases;
  const auto add = [&](torch::ScalarType dtype, const std::vector<Shape>& shapes) {
    for (const Shape& s : shapes)  // small to large: the timing budget left over goes to the large
      for (const std::int64_t d : {64, 128})
        for (const bool causal : {false, true}) cases.push_back({dtype, causal, d, s.batch, s.heads, s.seq});
  };
  if (quick) {
    add(torch::kBFloat16, {{2, 8, 512}, {2, 8, 1000}, {2, 8, 2048}});
    add(torch::kHalf, {{2, 8, 1000}});
  } else {
    const std::vector<Shape> shapes{{4, 16, 512}, {3, 12, 1000}, {4, 16, 1024}, {2, 16, 2048}, {2, 8, 4096}};
    add(torch::kBFloat16, shapes);
    add(torch::kHalf, shapes);
  }
  std::stable_sort(cases.begin(), cases.end(),
                   [](const Case& a, const Case& b) { return fwd_bwd_flops(a) < fwd_bwd_flops(b); });
  return cases;
}

// ---- the two implementations and the reference ----

struct Result {
  torch::Tensor out, dq, dk, dv;
};

Result run_partune(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& dout,
                   bool causal) {
  const torch::Tensor out = partune::kernels::flash_attention(q, k, v, causal);
  const torch::autograd::variable_list g = torch::autograd::grad({out}, {q, k, v}, {dout});
  return {out.detach(), g[0], g[1], g[2]};
}

Result run_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& dout,
                bool causal) {
#if PARTUNE_HAVE_SDPA
  // aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value,
  //   Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *,
  //   float? scale=None, bool enable_gqa=False) -> Tensor   (scale None: 1/sqrt(E))
  const torch::Tensor out = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                                             /*is_causal=*/causal);
  const torch::autograd::variable_list g = torch::autograd::grad({out}, {q, k, v}, {dout});
  return {out.detach(), g[0], g[1], g[2]};
#else
  (void)q, (void)k, (void)v, (void)dout, (void)causal;
  throw std::runtime_error("scaled_dot_product_attention needs LibTorch >= 2.0");
#endif
}

// Which SDPA backend LibTorch picks for these inputs (aten::_fused_sdp_choice, the choice
// scaled_dot_product_attention itself makes); the numbering of sdp::SDPBackend.
std::string sdpa_backend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
#if PARTUNE_HAVE_SDPA
  try {
    const std::int64_t choice = at::_fused_sdp_choice(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, causal);
    switch (choice) {
      case 0: return "math";
      case 1: return "flash_attention";
      case 2: return "efficient_attention";
      case 3: return "cudnn_attention";
      default: return "backend " + std::to_string(choice);
    }
  } catch (const std::exception& e) {
    return std::string("unknown (") + e.what() + ")";
  }
#else
  (void)q, (void)k, (void)v, (void)causal;
  return "unavailable";
#endif
}

// The float32 reference of the file comment, [batch, heads, seq, head_dim] each.
Result reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& dout,
                 bool causal) {
  torch::NoGradGuard no_grad;
  const std::int64_t b = q.size(0), h = q.size(1), s = q.size(2), d = q.size(3), bh = b * h;
  const double scale = 1.0 / std::sqrt(double(d));
  const auto flat = [&](const torch::Tensor& t) { return t.detach().to(torch::kFloat32).reshape({bh, s, d}); };
  const torch::Tensor Q = flat(q), K = flat(k), V = flat(v), dO = flat(dout);
  Result r{torch::empty_like(Q), torch::empty_like(Q), torch::empty_like(Q), torch::empty_like(Q)};
  const torch::Tensor hidden = torch::ones({s, s}, Q.options().dtype(torch::kBool)).triu(1);  // key j > query i
  const std::int64_t chunk = std::max<std::int64_t>(1, kReferenceChunkBytes / (s * s * 4));
  for (std::int64_t c0 = 0; c0 < bh; c0 += chunk) {
    const std::int64_t n = std::min(chunk, bh - c0);
    const torch::Tensor q_c = Q.narrow(0, c0, n), k_c = K.narrow(0, c0, n), v_c = V.narrow(0, c0, n),
                        do_c = dO.narrow(0, c0, n);
    torch::Tensor scores = torch::bmm(q_c, k_c.transpose(1, 2)).mul_(scale);
    if (causal) scores.masked_fill_(hidden, -std::numeric_limits<float>::infinity());
    const torch::Tensor p = torch::softmax(scores, -1);
    scores = torch::Tensor();
    const torch::Tensor out = torch::bmm(p, v_c);
    r.out.narrow(0, c0, n).copy_(out);
    r.dv.narrow(0, c0, n).copy_(torch::bmm(p.transpose(1, 2), do_c));
    torch::Tensor ds = torch::bmm(do_c, v_c.transpose(1, 2));  // dP
    ds.sub_((do_c * out).sum(-1, /*keepdim=*/true)).mul_(p);   // dS = P o (dP - D)
    r.dq.narrow(0, c0, n).copy_(torch::bmm(ds, k_c).mul_(scale));
    r.dk.narrow(0, c0, n).copy_(torch::bmm(ds.transpose(1, 2), q_c).mul_(scale));
  }
  const auto back = [&](const torch::Tensor& t) { return t.reshape({b, h, s, d}); };
  return {back(r.out), back(r.dq), back(r.dk), back(r.dv)};
}

// ---- errors ----

struct Error {
  double max_abs = 0;  // over the finite elements
  double max_ref = 0;  // max |ref|
  std::int64_t non_finite = 0;
  double max_rel() const { return max_ref > 0 ? max_abs / max_ref : max_abs; }
};

Error error_of(const torch::Tensor& got, const torch::Tensor& ref) {
  torch::NoGradGuard no_grad;
  const torch::Tensor g = got.detach().to(torch::kFloat32);
  const torch::Tensor finite = torch::isfinite(g);
  Error e;
  e.non_finite = g.numel() - finite.sum().item<std::int64_t>();
  e.max_abs = torch::where(finite, (g - ref).abs(), torch::zeros({}, g.options())).max().item<double>();
  e.max_ref = ref.abs().max().item<double>();
  return e;
}

constexpr int kTensors = 4;
const char* const kTensorNames[kTensors] = {"out", "dq", "dk", "dv"};
const torch::Tensor& tensor_of(const Result& r, int i) {
  return i == 0 ? r.out : i == 1 ? r.dq : i == 2 ? r.dk : r.dv;
}

// ---- timing ----

struct Timing {
  std::vector<double> ms;  // every repeat, in the order run
  double median = NAN, min = NAN, max = NAN;
  void summarise() {
    if (ms.empty()) return;
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    min = s.front();
    max = s.back();
  }
};

template <typename F>
double time_ms(F&& f) {
  torch::cuda::synchronize();
  const Clock::time_point t0 = Clock::now();
  f();
  torch::cuda::synchronize();
  return seconds_since(t0) * 1e3;
}

// ---- one case ----

struct CaseResult {
  Case c;
  std::string backend;
  std::string error;  // an exception's message; the case then fails
  Error partune[kTensors], sdpa[kTensors];
  double partune_vs_sdpa[kTensors] = {NAN, NAN, NAN, NAN};  // max |partune - sdpa|
  double limit[kTensors] = {NAN, NAN, NAN, NAN};            // the pass threshold on partune's max abs error
  bool tensor_ok[kTensors] = {false, false, false, false};
  bool ok = false;
  int warmup = 0;
  Timing partune_time, sdpa_time;
  double flops = 0;
};

void run_case(CaseResult& r, double& budget_left_s, std::size_t cases_left, bool quick) {
  const Case& c = r.c;
  r.flops = fwd_bwd_flops(c);
  torch::manual_seed(kSeed + std::uint64_t(c.seq * 1000 + c.head_dim * 10 + c.causal) +
                     (c.dtype == torch::kHalf ? 7 : 0));
  const auto options = torch::TensorOptions().device(torch::kCUDA, 0).dtype(torch::kFloat32);
  const auto input = [&] {
    return torch::randn({c.batch, c.heads, c.seq, c.head_dim}, options).to(c.dtype).requires_grad_(true);
  };
  const torch::Tensor q = input(), k = input(), v = input();
  const torch::Tensor dout = torch::randn({c.batch, c.heads, c.seq, c.head_dim}, options).to(c.dtype);
  r.backend = sdpa_backend(q, k, v, c.causal);

  // Accuracy (the first, cold, call of each).
  {
    const Result p = run_partune(q, k, v, dout, c.causal);
    const Result s = run_sdpa(q, k, v, dout, c.causal);
    const Result ref = reference(q, k, v, dout, c.causal);
    r.ok = true;
    for (int i = 0; i < kTensors; ++i) {
      r.partune[i] = error_of(tensor_of(p, i), tensor_of(ref, i));
      r.sdpa[i] = error_of(tensor_of(s, i), tensor_of(ref, i));
      r.partune_vs_sdpa[i] =
          (tensor_of(p, i).to(torch::kFloat32) - tensor_of(s, i).to(torch::kFloat32)).abs().max().item<double>();
      r.limit[i] = kSdpaErrorFactor * r.sdpa[i].max_abs + unit_roundoff(c.dtype) * r.partune[i].max_ref;
      r.tensor_ok[i] = r.partune[i].non_finite == 0 && r.sdpa[i].non_finite == 0 && r.partune[i].max_abs <= r.limit[i];
      r.ok = r.ok && r.tensor_ok[i];
    }
  }

  // Speed: warm-up, then interleaved repeats as many as the budget allows.
  r.warmup = 1;
  double pair_s = 0;
  for (int w = 0; w < r.warmup; ++w)
    pair_s = (time_ms([&] { run_partune(q, k, v, dout, c.causal); }) +
              time_ms([&] { run_sdpa(q, k, v, dout, c.causal); })) /
             1e3;
  const int max_repeats = quick ? 5 : 9;
  const double share_s = budget_left_s / double(std::max<std::size_t>(cases_left, 1));
  const int repeats = std::clamp(pair_s > 0 ? int(share_s / pair_s) : max_repeats, 1, max_repeats);
  for (int i = 0; i < repeats; ++i) {
    const auto partune = [&] { r.partune_time.ms.push_back(time_ms([&] { run_partune(q, k, v, dout, c.causal); })); };
    const auto sdpa = [&] { r.sdpa_time.ms.push_back(time_ms([&] { run_sdpa(q, k, v, dout, c.causal); })); };
    if (i % 2 == 0) {
      partune();
      sdpa();
    } else {
      sdpa();
      partune();
    }
  }
  r.partune_time.summarise();
  r.sdpa_time.summarise();
  budget_left_s -= (pair_s * (r.warmup + repeats));  // approximately what the timing spent
}

double tflops(double flops, double ms) { return flops / (ms * 1e-3) / 1e12; }

void print_case(const CaseResult& r) {
  const Case& c = r.c;
  std::printf("%s d=%-3lld %-6s b=%lld h=%-2lld s=%-4lld ", dtype_name(c.dtype), (long long)c.head_dim,
              c.causal ? "causal" : "full", (long long)c.batch, (long long)c.heads, (long long)c.seq);
  if (!r.error.empty()) {
    std::printf("ERROR: %s  FAIL\n", r.error.c_str());
    return;
  }
  std::printf("| max abs err vs fp32 partune/sdpa:");
  for (int i = 0; i < kTensors; ++i)
    std::printf(" %s %.1e/%.1e%s", kTensorNames[i], r.partune[i].max_abs, r.sdpa[i].max_abs,
                r.partune[i].non_finite || r.sdpa[i].non_finite ? "(NON-FINITE)" : r.tensor_ok[i] ? "" : "(!)");
  std::printf(" | fwd+bwd ms partune %.3g (%.3g..%.3g) %.2f TF/s, sdpa[%s] %.3g (%.3g..%.3g) %.1f TF/s, x%zu"
              " | partune/sdpa time %.2f  %s\n",
              r.partune_time.median, r.partune_time.min, r.partune_time.max, tflops(r.flops, r.partune_time.median),
              r.backend.c_str(), r.sdpa_time.median, r.sdpa_time.min, r.sdpa_time.max,
              tflops(r.flops, r.sdpa_time.median), r.partune_time.ms.size(),
              r.partune_time.median / r.sdpa_time.median, r.ok ? "ok" : "FAIL");
}

// ---- JSON (nlohmann: numbers that are not finite become null) ----

nlohmann::json error_json(const Error& e) {
  return {{"max_abs", e.max_abs}, {"max_rel", e.max_rel()}, {"max_abs_ref", e.max_ref}, {"non_finite", e.non_finite}};
}
nlohmann::json timing_json(const Timing& t, double flops) {
  return {{"median_ms", t.median}, {"min_ms", t.min}, {"max_ms", t.max},
          {"tflops_at_median", tflops(flops, t.median)}, {"repeats_ms", t.ms}};
}

struct Run {
  std::string status;  // "pass", "fail", "skipped"
  std::string reason;  // for "skipped"
  std::string device;
  bool quick = false;
  double budget_s = 0;
  bool tf32_reference = false;
  double wall_s = 0;
  std::vector<CaseResult> cases;
};

nlohmann::json case_json(const CaseResult& r) {
  const Case& c = r.c;
  const double ratio = r.partune_time.median / r.sdpa_time.median;
  nlohmann::json tensors = nlohmann::json::object();
  for (int i = 0; i < kTensors; ++i)
    tensors[kTensorNames[i]] = {
        {"partune", error_json(r.partune[i])}, {"sdpa", error_json(r.sdpa[i])},
        {"partune_vs_sdpa_max_abs", r.partune_vs_sdpa[i]},
        {"partune_vs_sdpa_max_rel", r.partune[i].max_ref > 0 ? r.partune_vs_sdpa[i] / r.partune[i].max_ref : NAN},
        {"limit_max_abs", r.limit[i]}, {"pass", r.tensor_ok[i]}};
  return {{"dtype", dtype_name(c.dtype)}, {"causal", c.causal}, {"head_dim", c.head_dim}, {"batch", c.batch},
          {"heads", c.heads}, {"seq", c.seq}, {"sdpa_backend", r.backend}, {"pass", r.ok},
          {"error", r.error.empty() ? nlohmann::json() : nlohmann::json(r.error)}, {"tensors", tensors},
          {"flops_fwd_bwd", r.flops}, {"warmup", r.warmup}, {"partune", timing_json(r.partune_time, r.flops)},
          {"sdpa", timing_json(r.sdpa_time, r.flops)}, {"time_ratio_partune_over_sdpa", ratio},
          {"speed_ratio_partune_over_sdpa", 1.0 / ratio}};
}

bool write_json(const std::string& path, const Run& run) {
  nlohmann::json cases = nlohmann::json::array();
  int failures = 0;
  double log_sum = 0;
  int logs = 0;
  for (const CaseResult& r : run.cases) {
    failures += r.ok ? 0 : 1;
    const double ratio = r.partune_time.median / r.sdpa_time.median;
    if (std::isfinite(ratio) && ratio > 0) {
      log_sum += std::log(ratio);
      ++logs;
    }
    cases.push_back(case_json(r));
  }
  const nlohmann::json j = {
      {"program", "flash_attention_sdpa_check"}, {"status", run.status}, {"reason", run.reason},
      {"torch_version", TORCH_VERSION}, {"device", run.device}, {"quick", run.quick},
      {"timing_budget_s", run.budget_s},
      {"reference", "float32 math on the GPU (softmax(q k^T / sqrt(d) + mask) v and its gradients)"},
      {"reference_tf32", run.tf32_reference},
      {"pass_rule", "per tensor: all finite and partune max_abs <= 2 * sdpa max_abs + u * max|ref|, u = 2^-8 (bf16) "
                    "or 2^-11 (fp16)"},
      {"flops_rule", "14 b h s^2 d for forward+backward, halved when causal"},
      {"time_ratio", "partune median / sdpa median (> 1: partune slower)"}, {"wall_s", run.wall_s},
      {"cases", cases},
      {"summary", {{"cases", run.cases.size()}, {"failures", failures},
                   {"time_ratio_geomean", logs ? std::exp(log_sum / logs) : NAN}}}};
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) {
    std::fprintf(stderr, "flash_attention_sdpa_check: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

int finish_skipped(const Options& opt, Run& run, const std::string& reason) {
  std::printf("%s: skipped\n", reason.c_str());
  run.status = "skipped";
  run.reason = reason;
  if (!opt.json_path.empty() && !write_json(opt.json_path, run)) return kExitFail;
  return kExitSkip;
}

std::string device_description() {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "CUDA device 0";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                double(p.totalGlobalMem) / double(1ULL << 30));
  return buf;
}

int run_all(const Options& opt) {
  const Clock::time_point t0 = Clock::now();
  Run run;
  run.quick = opt.quick;
  run.budget_s = opt.budget_s >= 0 ? opt.budget_s : opt.quick ? 6.0 : 60.0;
  if (!PARTUNE_HAVE_SDPA)
    return finish_skipped(opt, run,
                          "scaled_dot_product_attention needs LibTorch >= 2.0 (this is " TORCH_VERSION ")");
  if (!torch::cuda::is_available() || torch::cuda::device_count() == 0)
    return finish_skipped(opt, run, "no CUDA device visible to LibTorch " TORCH_VERSION);
  if (!partune::kernels::flash_attention_has_cuda())
    return finish_skipped(opt, run, "this partune build has no CUDA FlashAttention kernels");

  // The reference's matmuls in true fp32 (the default, made explicit).
  at::globalContext().setAllowTF32CuBLAS(false);
  run.tf32_reference = at::globalContext().allowTF32CuBLAS();
  run.device = device_description();
  std::printf("device 0: %s; LibTorch %s; %s mode, timing budget %.0f s\n", run.device.c_str(), TORCH_VERSION,
              opt.quick ? "quick" : "full", run.budget_s);
  std::printf("pass: per tensor partune max abs err <= %.0f x sdpa's + u x max|ref| (u = 2^-8 bf16, 2^-11 fp16), "
              "all finite\n",
              kSdpaErrorFactor);

  const std::vector<Case> cases = make_cases(opt.quick);
  double budget_left_s = run.budget_s;
  int failures = 0;
  for (std::size_t n = 0; n < cases.size(); ++n) {
    CaseResult r;
    r.c = cases[n];
    try {
      run_case(r, budget_left_s, cases.size() - n, opt.quick);
    } catch (const std::exception& e) {
      r.ok = false;
      r.error = e.what();
      const std::size_t cut = r.error.find('\n');  // LibTorch appends a backtrace
      if (cut != std::string::npos) r.error.resize(cut);
    }
    failures += r.ok ? 0 : 1;
    print_case(r);
    std::fflush(stdout);
    run.cases.push_back(std::move(r));
  }
  run.wall_s = seconds_since(t0);
  run.status = failures ? "fail" : "pass";

  // Summary: the worst partune error relative to SDPA's per tensor, and time ratios.
  double worst[kTensors] = {0, 0, 0, 0};
  for (const CaseResult& r : run.cases)
    for (int i = 0; i < kTensors; ++i)
      if (r.error.empty() && r.sdpa[i].max_abs > 0)
        worst[i] = std::max(worst[i], r.partune[i].max_abs / r.sdpa[i].max_abs);
  std::printf("summary: %zu cases, %d failure(s); worst partune/sdpa max-abs-error ratio: out %.2f dq %.2f dk %.2f "
              "dv %.2f\n",
              run.cases.size(), failures, worst[0], worst[1], worst[2], worst[3]);
  for (const torch::ScalarType t : {torch::kBFloat16, torch::kHalf}) {
    double sum = 0, best = INFINITY, worst_ratio = 0;
    int n = 0;
    for (const CaseResult& r : run.cases) {
      const double ratio = r.partune_time.median / r.sdpa_time.median;
      if (r.c.dtype != t || !std::isfinite(ratio) || ratio <= 0) continue;
      sum += std::log(ratio);
      best = std::min(best, ratio);
      worst_ratio = std::max(worst_ratio, ratio);
      ++n;
    }
    if (n)
      std::printf("summary: %s fwd+bwd time partune/sdpa: geomean %.2f (%.2f..%.2f) over %d cases\n",
                  dtype_name(t), std::exp(sum / n), best, worst_ratio, n);
  }
  std::printf("%s: %d failure(s) in %.1f s\n", failures ? "FAIL" : "ok", failures, run.wall_s);
  if (!opt.json_path.empty() && !write_json(opt.json_path, run)) return kExitFail;
  return failures ? kExitFail : kExitPass;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  const int parsed = parse_arguments(argc, argv, opt);
  if (parsed == 1) {
    usage(stdout);
    return kExitPass;
  }
  if (parsed != 0) {
    usage(stderr);
    return kExitUsage;
  }
  try {
    return run_all(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash_attention_sdpa_check: %s\n", e.what());
    return kExitFail;
  }
}
