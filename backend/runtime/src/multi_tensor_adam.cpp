// MultiTensorAdam (multi_tensor_adam.hpp): torch::optim::Adam's update, one foreach call
// per operation over every parameter of a group.
#include "partune/backend/multi_tensor_adam.hpp"

#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>

namespace partune::backend {

namespace {

// torch::optim::Optimizer keys its state by the parameter's TensorImpl: as the pointer's
// text in LibTorch 1.13, as the pointer itself from 2.x (torch_compat.hpp's two versions).
template <class Key>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << p.unsafeGetTensorImpl();
    return text.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

bool steps_in_bulk(const torch::optim::AdamOptions& o) { return o.weight_decay() == 0 && !o.amsgrad(); }

// 2^26 elements: the temporary square roots of one group take at most 256 MiB in fp32.
constexpr std::int64_t kGroupElements = std::int64_t{1} << 26;

struct AdamStep {
  double lr, beta1, beta2, eps;
  std::int64_t step;
};

void foreach_adam(std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& grads,
                  std::vector<torch::Tensor>& exp_avg, std::vector<torch::Tensor>& exp_avg_sq, const AdamStep& a) {
  const double bias_correction1 = 1 - std::pow(a.beta1, static_cast<double>(a.step));
  const double bias_correction2 = 1 - std::pow(a.beta2, static_cast<double>(a.step));
  // exp_avg = beta1 exp_avg + (1 - beta1) g;  exp_avg_sq = beta2 exp_avg_sq + (1 - beta2) g^2
  at::_foreach_mul_(exp_avg, a.beta1);
  at::_foreach_add_(exp_avg, grads, 1 - a.beta1);
  at::_foreach_mul_(exp_avg_sq, a.beta2);
  at::_foreach_addcmul_(exp_avg_sq, grads, grads, 1 - a.beta2);
  // p -= lr / bc1 * exp_avg / (sqrt(exp_avg_sq) / sqrt(bc2) + eps)
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(exp_avg_sq);
  at::_foreach_div_(denom, std::sqrt(bias_correction2));
  at::_foreach_add_(denom, a.eps);
  at::_foreach_addcdiv_(params, exp_avg, denom, -a.lr / bias_correction1);
}

// LibTorch 2.x's fused Adam kernel (what torch.optim.Adam(fused=True) and the training
// stacks' FusedAdam run): one pass reading parameter, gradient and both moments and writing
// parameter and moments, no temporaries. CUDA fp32 parameters only (the masters).
#if TORCH_VERSION_MAJOR >= 2 && !defined(PARTUNE_NO_FUSED_ADAM)
bool fused_adam_runs(const std::vector<torch::Tensor>& params) {
  return !params.empty() && params.front().is_cuda() &&
         std::all_of(params.begin(), params.end(), [](const torch::Tensor& p) { return p.scalar_type() == torch::kFloat; });
}

void fused_adam(std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& grads,
                std::vector<torch::Tensor>& exp_avg, std::vector<torch::Tensor>& exp_avg_sq, const AdamStep& a) {
  // The kernel reads each tensor's step count from a device scalar: one, shared.
  const torch::Tensor step = torch::full({}, static_cast<double>(a.step), params.front().options());
  const std::vector<torch::Tensor> steps(params.size(), step);
  at::_fused_adam_(params, grads, exp_avg, exp_avg_sq, {}, steps, a.lr, a.beta1, a.beta2, /*weight_decay=*/0.0,
                   a.eps, /*amsgrad=*/false, /*maximize=*/false);
}
#else
bool fused_adam_runs(const std::vector<torch::Tensor>&) { return false; }
void fused_adam(std::vector<torch::Tensor>&, std::vector<torch::Tensor>&, std::vector<torch::Tensor>&,
                std::vector<torch::Tensor>&, const AdamStep&) {}
#endif

}  // namespace

torch::Tensor MultiTensorAdam::step(LossClosure closure) {
  for (const auto& group : param_groups_)
    if (!steps_in_bulk(static_cast<const torch::optim::AdamOptions&>(group.options())))
      return torch::optim::Adam::step(std::move(closure));
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  using Key = typename std::decay_t<decltype(state_)>::key_type;
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamOptions&>(group.options());
    // Tensors stepped together share their step count (a parameter's state is created at
    // its first gradient, as torch::optim::Adam does): one list per count.
    std::map<std::int64_t, std::vector<torch::optim::AdamParamState*>> by_step;
    std::map<std::int64_t, std::vector<torch::Tensor>> params, grads;
    for (const torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& slot = state_[state_key<Key>(p)];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<torch::optim::AdamParamState&>(*slot);
      state.step(state.step() + 1);
      by_step[state.step()].push_back(&state);
      params[state.step()].push_back(p);
      grads[state.step()].push_back(p.grad());
    }
    const auto [beta1, beta2] = options.betas();
    for (auto& [step, states] : by_step) {
      std::vector<torch::Tensor> exp_avg, exp_avg_sq;
      for (auto* s : states) {
        exp_avg.push_back(s->exp_avg());
        exp_avg_sq.push_back(s->exp_avg_sq());
      }
      const AdamStep at{options.lr(), beta1, beta2, options.eps(), step};
      if (fused_adam_runs(params[step])) {
        fused_adam(params[step], grads[step], exp_avg, exp_avg_sq, at);
        continue;
      }
      // In groups of at most kGroupElements elements: the square roots' temporary list
      // is one group's, not a second copy of the whole second moment.
      for (std::size_t first = 0; first < params[step].size();) {
        std::size_t last = first;
        for (std::int64_t n = 0; last < params[step].size() && (last == first || n + params[step][last].numel() <= kGroupElements); ++last)
          n += params[step][last].numel();
        const auto part = [&](std::vector<torch::Tensor>& v) {
          return std::vector<torch::Tensor>(v.begin() + static_cast<long>(first), v.begin() + static_cast<long>(last));
        };
        auto p = part(params[step]), g = part(grads[step]), m = part(exp_avg), v = part(exp_avg_sq);
        foreach_adam(p, g, m, v, at);
        first = last;
      }
    }
  }
  return loss;
}

}  // namespace partune::backend
