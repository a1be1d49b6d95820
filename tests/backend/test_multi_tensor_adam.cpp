// MultiTensorAdam (multi_tensor_adam.hpp) against LibTorch's own torch::optim::Adam: the
// same parameters and gradients give the same values after every step (the reference is
// LibTorch's per-tensor loop, not partune's arithmetic), parameters that first get a
// gradient late keep their own step count, and the state saves into and loads from
// torch::optim::Adam's archive.
//
// LibTorch first, then catch.hpp with c10's CHECK undefined (see test_backend.cpp).
#include <sstream>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/multi_tensor_adam.hpp"

#undef CHECK
#include <catch2/catch.hpp>

using partune::backend::MultiTensorAdam;

namespace {

std::vector<torch::Tensor> fresh_parameters() {
  torch::manual_seed(7);
  std::vector<torch::Tensor> ps;
  for (const auto& shape : std::vector<std::vector<long>>{{5, 3}, {17}, {2, 4, 6}, {1}})
    ps.push_back(torch::randn(shape, torch::kFloat).set_requires_grad(true));
  return ps;
}

// Gradient of step `step` for parameter `i`; parameter 3 gets none before step 3.
void set_gradients(std::vector<torch::Tensor>& ps, int step) {
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (i == 3 && step < 3) continue;
    torch::manual_seed(100 * step + static_cast<int>(i));
    ps[i].mutable_grad() = torch::randn_like(ps[i]);
  }
}

double largest_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

}  // namespace

TEST_CASE("multi-tensor Adam steps as torch::optim::Adam does", "[optimizer]") {
  auto mine = fresh_parameters(), theirs = fresh_parameters();
  const auto options = torch::optim::AdamOptions(3e-2).betas({0.8, 0.95}).eps(1e-6);
  MultiTensorAdam bulk(mine, options);
  torch::optim::Adam reference(theirs, options);
  for (int step = 1; step <= 6; ++step) {
    set_gradients(mine, step);
    set_gradients(theirs, step);
    bulk.step();
    reference.step();
    INFO("step " << step);
    CHECK(largest_difference(mine, theirs) <= 1e-6);
  }
  // The late parameter moved, and by less than the others' six steps would allow.
  CHECK(largest_difference({mine[3]}, {fresh_parameters()[3]}) > 0);
}

TEST_CASE("multi-tensor Adam's state loads into torch::optim::Adam and back", "[optimizer]") {
  auto mine = fresh_parameters(), theirs = fresh_parameters();
  const auto options = torch::optim::AdamOptions(1e-2);
  MultiTensorAdam bulk(mine, options);
  torch::optim::Adam reference(theirs, options);
  for (int step = 1; step <= 3; ++step) {
    set_gradients(mine, step);
    set_gradients(theirs, step);
    bulk.step();
    reference.step();
  }
  // Swap the two optimizers' states through their archives, then step on.
  std::stringstream bulk_state, reference_state;
  torch::serialize::OutputArchive a, b;
  bulk.save(a);
  a.save_to(bulk_state);
  reference.save(b);
  b.save_to(reference_state);
  torch::serialize::InputArchive ia, ib;
  ia.load_from(reference_state);
  bulk.load(ia);
  ib.load_from(bulk_state);
  reference.load(ib);
  set_gradients(mine, 4);
  set_gradients(theirs, 4);
  bulk.step();
  reference.step();
  CHECK(largest_difference(mine, theirs) <= 1e-6);
}

TEST_CASE("multi-tensor Adam with weight decay is torch::optim::Adam's own step", "[optimizer]") {
  auto mine = fresh_parameters(), theirs = fresh_parameters();
  const auto options = torch::optim::AdamOptions(1e-2).weight_decay(0.1);
  MultiTensorAdam bulk(mine, options);
  torch::optim::Adam reference(theirs, options);
  set_gradients(mine, 5);
  set_gradients(theirs, 5);
  bulk.step();
  reference.step();
  CHECK(largest_difference(mine, theirs) == 0);
}
