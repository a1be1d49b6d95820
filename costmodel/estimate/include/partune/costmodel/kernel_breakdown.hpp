#pragma once
// Where one rank's step goes, kernel category by kernel category, as a profiler sums a
// step's kernels (LibTorch's Kineto profile in docs/device-runs: `step_kernel_profile`):
// the layer plan's op times (op_cost.hpp) over the first pipeline stage's layers, its
// micro-batches and their recomputation, the embedding and the head, and the optimizer
// step. The categories the profile names: GEMMs, the attention core, element-wise kernels
// (contiguous and strided), reductions and norms, copies, the optimizer's kernels, and the
// time no kernel runs because the host is still launching them. Communication is not in
// it (a single-GPU job has none).
#include <string>
#include <vector>

#include "partune/costmodel/job.hpp"

namespace partune {

struct KernelBreakdown {
  double gemm = 0, attention = 0, elementwise = 0, reduction_norm = 0, copy = 0, optimizer = 0;
  double dispatch_idle = 0;
  long launches = 0;  // the step's kernels
  double kernels() const { return gemm + attention + elementwise + reduction_norm + copy + optimizer; }
  double total() const { return kernels() + dispatch_idle; }
  // The categories by the profile's names, in that order ("gemm", "attention",
  // "elementwise", "reduction_norm", "copy", "optimizer").
  std::vector<std::pair<std::string, double>> categories() const;
};

KernelBreakdown kernel_breakdown(const Job& job);

}  // namespace partune
