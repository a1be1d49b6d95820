#pragma once
// A split backward's deferred weight gradients (zero-bubble schedules, schedule.hpp):
// under split_backward(true) the projections (project(), and sequence parallelism's
// gathered GEMM) run as an autograd function whose backward computes dX and hands
// dW = dY^T X to the store open at that moment (the program's `backward`, B); the
// `backward_weight` instruction (W) runs the store, accumulating into the weights'
// gradients as autograd would have. With no store open the same function computes both.
// What is not a projection (norms, biases, routers, experts' batched GEMMs, latent
// projections, the embedding) gets its gradient in B, as before: the sum is the same.
// The choice is process-wide, set by the executor (a process is a rank).
#include <functional>
#include <vector>

#include <torch/torch.h>

namespace partune::backend {

class WeightGradientStore {
 public:
  // Opens the store for the backward run in its lifetime (one at a time per process).
  class Scope {
   public:
    explicit Scope(WeightGradientStore& store);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };
  // The deferred dW's, in the order backward reached them; empties the store.
  void run();
  bool empty() const { return work_.empty(); }
  // dW = dY^T X accumulated into `weight`'s gradient later (or now when no store is open).
  static void accumulate(const torch::Tensor& weight, const torch::Tensor& grad_output, const torch::Tensor& input);

 private:
  std::vector<std::function<void()>> work_;
};

// Whether the rank's projections split their backward (false by default).
void set_split_backward(bool on);
bool split_backward();

// y = x W^T through the splitting autograd function (project() uses it when
// split_backward()).
torch::Tensor split_linear(const torch::Tensor& x, const torch::Tensor& weight);

}  // namespace partune::backend
