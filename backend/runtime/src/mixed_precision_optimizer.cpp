// The rank's optimizer on fp32 masters where it needs them (mixed_precision_optimizer.hpp).
#include "partune/backend/mixed_precision_optimizer.hpp"

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "partune/backend/memory_accounting.hpp"
#include "partune/backend/multi_tensor_adam.hpp"

namespace partune::backend {

namespace {

// Adam as one multi-tensor step, or with PARTUNE_ADAM=per-tensor LibTorch's per-tensor
// loop (the device check's comparison); SGD.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<torch::Tensor>& params,
                                                        const OptimizerSettings& settings) {
  const auto adam = torch::optim::AdamOptions(settings.learning_rate);
  const char* loop = std::getenv("PARTUNE_ADAM");
  if (loop && *loop && std::string(loop) != "per-tensor" && std::string(loop) != "multi-tensor")
    throw std::runtime_error(fmt::format("PARTUNE_ADAM={}: expected per-tensor or multi-tensor", loop));
  if (settings.kind == Optimizer::adam && loop && std::string(loop) == "per-tensor")
    return std::make_unique<torch::optim::Adam>(params, adam);
  if (settings.kind == Optimizer::adam) return std::make_unique<MultiTensorAdam>(params, adam);
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(settings.learning_rate));
}

}  // namespace

MixedPrecisionOptimizer::MixedPrecisionOptimizer(std::vector<torch::Tensor> params, const OptimizerSettings& settings,
                                                 const ComputeDevice& compute, const ParallelConfig& parallel)
    : masters_on_device_(!parallel.offload_optimizer && compute.dtype != torch::kFloat),
      offload_parameters_(parallel.offload_parameters) {
  if (parallel.offload_optimizer || masters_on_device_) {
    // The optimizer's fp32 copies (and, stepping them, its state): host memory with
    // offload_optimizer (and with offload_parameters so is the shard the gathers start
    // from), else the device's.
    std::optional<HostMemoryScope> host;
    if (!masters_on_device_) host.emplace();
    torch::NoGradGuard no_grad;
    model_params_ = params;
    const torch::Device where = masters_on_device_ ? compute.device : torch::Device(torch::kCPU);
    for (torch::Tensor& d : model_params_) {
      torch::Tensor h = d.detach().to(where, torch::kFloat, /*non_blocking=*/false, /*copy=*/true).set_requires_grad(true);
      h.mutable_grad() = torch::zeros_like(h);
      masters_.push_back(h);
      if (offload_parameters_) d.set_data(d.detach().clone());
    }
    params = masters_;
  }
  optimizer_ = make_optimizer(params, settings);
}

void MixedPrecisionOptimizer::offload_gradients() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < model_params_.size(); ++i) {
    const torch::Tensor& g = model_params_[i].grad();
    torch::Tensor& mg = masters_[i].mutable_grad();
    if (masters_on_device_ && !mg.defined() && g.defined()) {  // fp32 from the model's format, one pass
      mg = g.to(torch::kFloat, /*non_blocking=*/false, /*copy=*/true);
      continue;
    }
    if (!mg.defined()) mg = torch::zeros_like(masters_[i]);  // LibTorch 2's zero_grad sets none
    if (g.defined()) mg.copy_(g);
    else mg.zero_();
  }
}

void MixedPrecisionOptimizer::average_gradients(int n) {
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer_->param_groups())
    for (torch::Tensor& p : group.params()) p.mutable_grad().div_(n);
}

void MixedPrecisionOptimizer::step() {
  if (masters_.empty() || masters_on_device_) {
    optimizer_->step();
  } else {
    HostMemoryScope host;  // the optimizer state is created and stepped on the host
    optimizer_->step();
  }
  if (offload_parameters_ || masters_on_device_) sync_model_from_masters();
  // The masters' fp32 gradients live only through the step: 4 bytes a parameter that the
  // cost model's 2 + 2 + 12 does not hold between steps (the model's own gradients are the 2).
  if (masters_on_device_)
    for (torch::Tensor& m : masters_) m.mutable_grad() = torch::Tensor();
}

void MixedPrecisionOptimizer::sync_model_from_masters() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < model_params_.size(); ++i) model_params_[i].copy_(masters_[i]);
}

void MixedPrecisionOptimizer::sync_masters() {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < model_params_.size(); ++i) masters_[i].copy_(model_params_[i]);
}

void MixedPrecisionOptimizer::zero_grad() {
  optimizer_->zero_grad();  // the host copies' gradients with offload_optimizer; the model's too
  for (torch::Tensor& d : model_params_)
    if (d.grad().defined()) d.mutable_grad().zero_();
}

void MixedPrecisionOptimizer::save(torch::serialize::OutputArchive& archive) { optimizer_->save(archive); }

void MixedPrecisionOptimizer::load(torch::serialize::InputArchive& archive) {
  optimizer_->load(archive);
  sync_masters();
}

}  // namespace partune::backend
