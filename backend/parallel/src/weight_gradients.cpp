// Deferred weight gradients for a split backward (weight_gradients.hpp), after the
// zero-bubble paper's WeightGradStore (Qi et al. 2023, section 5).
#include "partune/backend/weight_gradients.hpp"

#include <atomic>
#include <stdexcept>

namespace partune::backend {

namespace {

std::atomic<bool> split_on{false};
// The store of the backward running now. Not thread-local: on CUDA the autograd engine
// runs the nodes on its device thread.
std::atomic<WeightGradientStore*> open_store{nullptr};

void add_to_grad(torch::Tensor weight, const torch::Tensor& grad) {
  torch::NoGradGuard no_grad;
  if (weight.grad().defined()) weight.mutable_grad().add_(grad);
  else weight.mutable_grad() = grad.clone();
}

torch::Tensor rows(const torch::Tensor& t) { return t.reshape({-1, t.size(-1)}); }

// y = x W^T; backward: dX = dY W now, dW = dY^T X now or in the W step. The weight goes
// through saved_data (not save_for_backward) so the deferred work holds the parameter
// itself, whose gradient it accumulates.
struct SplitLinear : public torch::autograd::Function<SplitLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight) {
    ctx->save_for_backward({x});
    ctx->saved_data["weight"] = weight;
    return torch::nn::functional::linear(x, weight);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    const torch::Tensor weight = ctx->saved_data["weight"].toTensor();
    const torch::Tensor dy = grads[0].contiguous();
    const torch::Tensor dx = dy.matmul(weight);
    WeightGradientStore::accumulate(weight, dy, x);
    return {dx, torch::Tensor()};
  }
};

}  // namespace

WeightGradientStore::Scope::Scope(WeightGradientStore& store) {
  WeightGradientStore* none = nullptr;
  if (!open_store.compare_exchange_strong(none, &store))
    throw std::logic_error("a weight-gradient store is open already");
}

WeightGradientStore::Scope::~Scope() { open_store = nullptr; }

void WeightGradientStore::run() {
  std::vector<std::function<void()>> work;
  work.swap(work_);
  for (const auto& w : work) w();
}

void WeightGradientStore::accumulate(const torch::Tensor& weight, const torch::Tensor& grad_output,
                                     const torch::Tensor& input) {
  auto dw = [weight, dy = grad_output, x = input] { add_to_grad(weight, rows(dy).t().matmul(rows(x))); };
  if (WeightGradientStore* store = open_store.load()) store->work_.push_back(std::move(dw));
  else dw();
}

void set_split_backward(bool on) { split_on = on; }
bool split_backward() { return split_on; }

torch::Tensor split_linear(const torch::Tensor& x, const torch::Tensor& weight) { return SplitLinear::apply(x, weight); }

}  // namespace partune::backend
