// step_kernel_profile: where a training step's GPU time goes, kernel by kernel. Runs a job
// on the backend (one rank, --device cuda) for warm-up steps, then profiles one step with
// LibTorch's Kineto profiler and writes, as JSON, the step's wall time, its kernels' summed
// time by category (GEMM, attention, element-wise, reductions and norms, the optimizer's
// multi-tensor kernels, copies, other), the kernel count (launches) and the 40 longest
// kernels. The device check runs it on the single-GPU jobs (scripts/device-check.sh):
// the per-kernel evidence behind the measured breakdown of docs/gpu.md.
//   step_kernel_profile JOB.yaml OUT.json [WARMUP_STEPS] [--set KEY=VALUE ...]
// Needs LibTorch 2.x with CUDA (the GPU machine's): elsewhere it says so and exits 77.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

#include "partune/backend/trainer.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"

namespace {

// A kernel's category from its name (cuBLAS/CUTLASS GEMMs, FlashAttention/cuDNN attention,
// PyTorch's element-wise and reduction kernels, multi-tensor apply).
[[maybe_unused]] std::string category(const std::string& name) {
  static const std::vector<std::pair<std::string, std::regex>> rules = {
      {"optimizer", std::regex("multi_tensor|foreach|fused_adam", std::regex::icase)},
      {"attention", std::regex("flash|fmha|sdpa|attention|cudnn", std::regex::icase)},
      {"gemm", std::regex("gemm|cutlass|xmma|nvjet|cublas|sm90_|sm80_|wgmma", std::regex::icase)},
      // (GammaBetaBackward: LayerNorm's scale and shift gradients, a reduction over tokens.)
      {"reduction_norm", std::regex("reduce|norm|softmax|cross_entropy|nll|log_softmax|GammaBeta", std::regex::icase)},
      {"copy", std::regex("copy|memcpy|memset|cat|transpose|index", std::regex::icase)},
      {"elementwise", std::regex("elementwise|vectorized|unrolled|pointwise", std::regex::icase)},
  };
  for (const auto& [label, re] : rules)
    if (std::regex_search(name, re)) return label;
  return "other";
}

// argv[3..]: the warm-up step count and --set KEY=VALUE overrides; false (said) on anything else.
[[maybe_unused]] bool parse_arguments(int argc, char** argv, int& warmup, std::vector<std::string>& overrides) {
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      overrides.push_back(argv[++i]);
    } else if (!a.empty() && a.find_first_not_of("0123456789") == std::string::npos && a.size() < 6) {
      warmup = std::stoi(a);
    } else {
      std::fprintf(stderr, "step_kernel_profile: '%s': expected a number of warm-up steps or --set KEY=VALUE\n",
                   a.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: step_kernel_profile JOB.yaml OUT.json [WARMUP_STEPS] [--set KEY=VALUE ...]\n");
    return 2;
  }
#if TORCH_VERSION_MAJOR < 2
  std::fprintf(stderr, "step_kernel_profile: needs LibTorch 2.x with CUDA (this is %s)\n", TORCH_VERSION);
  return 77;
#else
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "step_kernel_profile: no CUDA device\n");
    return 77;
  }
  int warmup = 2;
  std::vector<std::string> overrides;
  if (!parse_arguments(argc, argv, warmup, overrides)) return 2;
  try {
    const partune::Job job = partune::load_job(argv[1], overrides);
    partune::backend::RunOptions options;
    options.device = partune::backend::DeviceKind::cuda;
    options.scale.whole = true;  // the job's model as it is, as partune-run --device cuda runs it
    partune::backend::Trainer trainer(job, options);
    for (int i = 0; i < warmup; ++i) trainer.step();
    namespace pi = torch::profiler::impl;
    const pi::ProfilerConfig config(pi::ProfilerState::KINETO, false, false);
    const std::set<pi::ActivityType> activities{pi::ActivityType::CPU, pi::ActivityType::CUDA};
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
    const auto t0 = std::chrono::steady_clock::now();
    const partune::backend::StepReport report = trainer.step();
    torch::cuda::synchronize();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto result = torch::autograd::profiler::disableProfiler();

    std::map<std::string, double> by_category;      // seconds
    std::map<std::string, std::pair<int, double>> by_kernel;  // launches, seconds
    int launches = 0;
    double kernel_seconds = 0;
    for (const auto& e : result->events()) {
      if (e.deviceType() != c10::DeviceType::CUDA) continue;
      const double s = static_cast<double>(e.durationNs()) * 1e-9;
      const std::string name = e.name();
      by_category[category(name)] += s;
      auto& k = by_kernel[name];
      k.first += 1;
      k.second += s;
      ++launches;
      kernel_seconds += s;
    }
    std::vector<std::pair<std::string, std::pair<int, double>>> longest(by_kernel.begin(), by_kernel.end());
    std::sort(longest.begin(), longest.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    if (longest.size() > 40) longest.resize(40);
    nlohmann::json out;
    out["job"] = job.name;
    out["device"] = trainer.device_description();
    out["step_seconds"] = report.seconds;
    out["profiled_wall_seconds"] = wall;
    out["kernel_seconds"] = kernel_seconds;
    out["kernel_launches"] = launches;
    out["by_category_seconds"] = by_category;
    for (const auto& [name, k] : longest)
      out["longest_kernels"].push_back({{"name", name.substr(0, 160)}, {"category", category(name)},
                                        {"launches", k.first}, {"seconds", k.second}});
    trainer.finish();
    std::ofstream(argv[2]) << out.dump(2) << "\n";
    std::printf("%s: step %.4f s (profiled %.4f s), kernels %.4f s in %d launches\n", job.name.c_str(),
                report.seconds, wall, kernel_seconds, launches);
    return 0;
  } catch (const partune::ScenarioError& e) {  // the job file: file, key and reason
    std::fprintf(stderr, "step_kernel_profile: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_kernel_profile: %s\n", e.what());
    return 1;
  }
#endif
}
