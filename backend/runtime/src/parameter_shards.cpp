// Per-parameter slices of a bucket (parameter_shards.hpp).
#include "partune/backend/parameter_shards.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/StorageImpl.h>

namespace partune::backend {

ParameterShards::ParameterShards(std::vector<torch::Tensor> params, int degree, int index)
    : params_(std::move(params)), degree_(degree), index_(index) {
  for (const torch::Tensor& p : params_) {
    const std::int64_t slice = (p.numel() + degree - 1) / degree;
    offset_.push_back(row_);
    slice_.push_back(slice);
    row_ += slice;
  }
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> values;
  for (const torch::Tensor& p : params_) values.push_back(p.detach());
  std::vector<torch::Tensor> rows;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor flat = torch::zeros({degree_ * slice_[i]}, params_[i].options());
    flat.narrow(0, 0, params_[i].numel()).copy_(values[i].reshape(-1));
    rows.push_back(flat.view({degree_, slice_[i]}).select(0, index_));
  }
  owned_ = (rows.empty() ? torch::zeros({0}) : torch::cat(rows)).clone().set_requires_grad(true);
  owned_.mutable_grad() = torch::zeros_like(owned_);
}

torch::Tensor ParameterShards::pack_gradients() const {
  std::vector<torch::Tensor> parts;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor flat = torch::zeros({degree_ * slice_[i]}, params_[i].options());
    const torch::Tensor& g = params_[i].grad();
    if (g.defined()) flat.narrow(0, 0, params_[i].numel()).copy_(g.reshape(-1));
    parts.push_back(flat.view({degree_, slice_[i]}));
  }
  return torch::cat(parts, 1).contiguous();
}

void ParameterShards::unpack_parameters(const torch::Tensor& packed) {
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i];
    const torch::Tensor values = packed.narrow(1, offset_[i], slice_[i]).reshape(-1).narrow(0, 0, p.numel());
    // Written through a separate tensor over the same memory: the parameter's version
    // counter must not move, or autograd would reject the graphs saved with it (the
    // backward of a layer gathers its weights again into the same tensors).
    torch::from_blob(p.data_ptr(), p.sizes(), p.options()).copy_(values.view(p.sizes()));
  }
}

std::pair<std::int64_t, std::int64_t> ParameterShards::owned_segment(std::size_t param) const {
  return {offset_[param], slice_[param]};
}

void ParameterShards::release() {
  if (!materialised_) return;
  for (torch::Tensor& p : params_) {
    c10::StorageImpl* storage = p.storage().unsafeGetStorageImpl();
    storage->set_data_ptr_noswap(c10::DataPtr(nullptr, p.device()));
    storage->set_nbytes(0);
  }
  materialised_ = false;
}

void ParameterShards::materialise() {
  if (materialised_) return;
  for (torch::Tensor& p : params_) {
    const std::size_t bytes = static_cast<std::size_t>(p.numel()) * p.element_size();
    c10::StorageImpl* storage = p.storage().unsafeGetStorageImpl();
    storage->set_data_ptr_noswap(c10::GetCPUAllocator()->allocate(bytes));
    storage->set_nbytes(bytes);
  }
  materialised_ = true;
}

}  // namespace partune::backend
