// Deferred weight gradients (weight_gradients.hpp): under a split backward the projection's
// backward leaves dW = dY^T X to the open store, and running the store gives what one
// backward gives, against LibTorch's own linear as the reference.
// (LibTorch first, then Catch: c10 defines a CHECK of its own; see test_backend.cpp.)
#include <stdexcept>

#include <torch/torch.h>

#include "partune/backend/fp8_linear.hpp"
#include "partune/backend/weight_gradients.hpp"

#undef CHECK
#include <catch2/catch.hpp>

using namespace partune::backend;

namespace {

struct Reference {
  torch::Tensor dx, dw;
};

Reference reference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy) {
  torch::Tensor xr = x.detach().clone().requires_grad_(true), wr = w.detach().clone().requires_grad_(true);
  torch::nn::functional::linear(xr, wr).backward(dy);
  return {xr.grad(), wr.grad()};
}

// Turns the split on for one test and off again.
struct SplitOn {
  SplitOn() { set_split_backward(true); }
  ~SplitOn() { set_split_backward(false); }
};

}  // namespace

TEST_CASE("a split backward defers dW to the store and the store gives LibTorch's dW", "[backend][zb]") {
  torch::manual_seed(7);
  const torch::Tensor x0 = torch::randn({2, 5, 8}, torch::kDouble), w0 = torch::randn({6, 8}, torch::kDouble);
  const torch::Tensor dy = torch::randn({2, 5, 6}, torch::kDouble);
  const Reference ref = reference(x0, w0, dy);
  SplitOn split;
  torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  WeightGradientStore store;
  {
    WeightGradientStore::Scope open(store);
    project(x, w).backward(dy);
  }
  CHECK(torch::allclose(x.grad(), ref.dx));  // B: the input gradient at once
  CHECK_FALSE(w.grad().defined());           // ... and no weight gradient yet
  CHECK_FALSE(store.empty());
  store.run();                               // W
  CHECK(store.empty());
  REQUIRE(w.grad().defined());
  CHECK(torch::allclose(w.grad(), ref.dw));
  // Two micro-batches' W's accumulate, as autograd's would.
  {
    WeightGradientStore::Scope open(store);
    project(x, w).backward(dy);
  }
  store.run();
  CHECK(torch::allclose(w.grad(), 2 * ref.dw));
}

TEST_CASE("with the split on but no store open, backward computes dW at once", "[backend][zb]") {
  torch::manual_seed(8);
  const torch::Tensor x0 = torch::randn({3, 4}, torch::kDouble), w0 = torch::randn({5, 4}, torch::kDouble);
  const torch::Tensor b0 = torch::randn({5}, torch::kDouble), dy = torch::randn({3, 5}, torch::kDouble);
  const Reference ref = reference(x0, w0, dy);
  SplitOn split;
  torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  torch::Tensor b = b0.clone().requires_grad_(true);
  project(x, w, b).backward(dy);
  REQUIRE(w.grad().defined());
  CHECK(torch::allclose(w.grad(), ref.dw));
  CHECK(torch::allclose(x.grad(), ref.dx));
  CHECK(torch::allclose(b.grad(), dy.sum(0)));  // the bias outside the split function
}

TEST_CASE("one store open at a time", "[backend][zb]") {
  WeightGradientStore a, b;
  WeightGradientStore::Scope open(a);
  CHECK_THROWS_AS(WeightGradientStore::Scope(b), std::logic_error);
}
