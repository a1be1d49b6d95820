#pragma once
// The optimizer of one rank: Adam (MultiTensorAdam, or LibTorch's per-tensor loop with
// PARTUNE_ADAM=per-tensor) or SGD on what the rank updates (its parameters, or its owned
// slices under optimizer-state sharding). It steps fp32 master copies of them when
// offload_optimizer puts them in host memory, or when the model is bf16 / fp16 (mixed
// precision: the masters stay on the device). Gradients go to the masters and the updated
// values come back. On CPU both sides of an offload are host memory; the copies still
// run, so the path is the one a GPU run takes. With offload_parameters the updated shard
// stays on the host: the owned slices the gathers start from take it.
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/compute_device.hpp"
#include "partune/costmodel/job.hpp"

namespace partune::backend {

struct OptimizerSettings {
  Optimizer kind = Optimizer::adam;
  double learning_rate = 1e-3;
};

class MixedPrecisionOptimizer {
 public:
  // `params`: what the rank updates, on `compute`'s device in its format. Throws
  // std::runtime_error for a PARTUNE_ADAM other than per-tensor or multi-tensor.
  MixedPrecisionOptimizer(std::vector<torch::Tensor> params, const OptimizerSettings& settings,
                          const ComputeDevice& compute, const ParallelConfig& parallel);

  // Whether masters are stepped, and whether on the device (mixed precision without
  // offload_optimizer) rather than in host memory.
  bool has_masters() const { return !masters_.empty(); }
  bool masters_on_device() const { return masters_on_device_; }

  // The gradients the optimizer will use, model -> masters (device -> host with
  // offload_optimizer; to fp32 with mixed precision). Nothing without masters.
  void offload_gradients();
  // Divides the gradients of what it steps by `n` (sums over the replicas to means).
  void average_gradients(int n);
  // One step; then the model takes the masters' values where no instruction brings them
  // (masters on the device, offload_parameters), and masters on the device drop their
  // fp32 gradients (they live only through the step).
  void step();
  // The model's parameters take the masters' values (host -> device after a host step).
  void sync_model_from_masters();
  // The masters take the model's values (after a checkpoint loads).
  void sync_masters();
  // The gradients of what it steps and of the model's parameters zeroed.
  void zero_grad();

  void save(torch::serialize::OutputArchive& archive);
  void load(torch::serialize::InputArchive& archive);

 private:
  std::vector<torch::Tensor> model_params_, masters_;
  bool masters_on_device_ = false;
  bool offload_parameters_ = false;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace partune::backend
