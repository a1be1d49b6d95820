// A mixture of experts' MLP in the LibTorch backend (expert_parallel.hpp): against a
// token-by-token reference written here (router, top-k, softmax of the chosen logits,
// each expert's MLP), and with expert parallelism 2 over Gloo (ranks as threads, as in
// test_tensor_parallel.cpp) against one process holding every expert: outputs and every
// gradient within 1e-5.
//
// LibTorch first, then #undef CHECK (c10 defines one), then Catch.
#include <atomic>
#include <chrono>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "partune/backend/expert_parallel.hpp"
#include "gloo_threads.hpp"

#undef CHECK
#include <catch2/catch.hpp>

using namespace partune::backend;

namespace {

// hidden 8, 4 experts of 12, 2 per token.
ExpertShape shape(bool swiglu, double capacity_factor) {
  ExpertShape s;
  s.hidden = 8;
  s.expert_ffn_hidden = 12;
  s.experts = 4;
  s.experts_per_token = 2;
  s.capacity_factor = capacity_factor;
  s.swiglu = swiglu;
  return s;
}

// The whole model's values (seeded), of which a module of `local` experts keeps experts
// [first, first + local).
struct Whole {
  torch::Tensor router, fc1, fc2, fc1_bias, fc2_bias;
};
Whole whole(const ExpertShape& s) {
  torch::manual_seed(7);
  const std::int64_t f1 = (s.swiglu ? 2 : 1) * s.expert_ffn_hidden;
  return {torch::randn({s.experts, s.hidden}), torch::randn({s.experts, f1, s.hidden}) * 0.3,
          torch::randn({s.experts, s.hidden, s.expert_ffn_hidden}) * 0.3, torch::randn({s.experts, f1}) * 0.1,
          torch::randn({s.experts, s.hidden}) * 0.1};
}
void load(ExpertMLPImpl& m, const Whole& w, std::int64_t first) {
  torch::NoGradGuard no_grad;
  m.router.copy_(w.router);
  m.fc1.copy_(w.fc1.narrow(0, first, m.local_experts));
  m.fc2.copy_(w.fc2.narrow(0, first, m.local_experts));
  m.fc1_bias.copy_(w.fc1_bias.narrow(0, first, m.local_experts));
  m.fc2_bias.copy_(w.fc2_bias.narrow(0, first, m.local_experts));
}

// One token through its experts, written out: the k largest router logits, the softmax
// of those, each chosen expert's MLP.
torch::Tensor reference_token(const Whole& w, const ExpertShape& s, const torch::Tensor& x) {
  const torch::Tensor logits = torch::mv(w.router, x);
  const auto top = logits.topk(s.experts_per_token);
  const torch::Tensor weight = torch::softmax(std::get<0>(top), 0);
  torch::Tensor out = torch::zeros({s.hidden});
  for (int j = 0; j < s.experts_per_token; ++j) {
    const std::int64_t e = std::get<1>(top)[j].item<std::int64_t>();
    torch::Tensor up = torch::mv(w.fc1[e], x) + w.fc1_bias[e];
    const std::int64_t f = s.expert_ffn_hidden;
    const torch::Tensor act = s.swiglu ? torch::silu(up.narrow(0, 0, f)) * up.narrow(0, f, f) : torch::gelu(up);
    out += weight[j] * (torch::mv(w.fc2[e], act) + w.fc2_bias[e]);
  }
  return out;
}

// Runs body(ep) on `degree` threads, one per rank of a fresh expert group (gloo_threads.hpp).
template <typename Body>
auto run_ranks(int degree, Body body) -> std::vector<decltype(body(ExpertParallel()))> {
  return partune::test::run_gloo_ranks("expert-group", degree, [&](auto group, int r) {
    return body(std::make_shared<ExpertParallelGroup>(group, degree, r));
  });
}

// A rank's micro-batch [2, 5, 8] (a leaf that wants its gradient, as a layer's input
// does) and the gradient it feeds back; drawn once, on the main thread (the global
// generator is not for threads).
struct Data {
  torch::Tensor batch[2], upstream[2];
  Data() {
    torch::manual_seed(100);
    for (int r = 0; r < 2; ++r) batch[r] = torch::randn({2, 5, 8});
    for (int r = 0; r < 2; ++r) upstream[r] = torch::randn({2, 5, 8});
  }
};
const Data& data() {
  static const Data d;
  return d;
}
torch::Tensor batch(int rank) { return data().batch[rank].clone().requires_grad_(true); }
torch::Tensor upstream(int rank) { return data().upstream[rank]; }

struct Run {
  torch::Tensor out, input_grad, router_grad, fc1_grad, fc2_grad, fc1_bias_grad, fc2_bias_grad;
};
Run run(ExpertMLPImpl& m, int rank) {
  const torch::Tensor x = batch(rank);
  const torch::Tensor out = m.forward(x);
  (out * upstream(rank)).sum().backward();
  return {out.detach(), x.grad(), m.router.grad(), m.fc1.grad(), m.fc2.grad(), m.fc1_bias.grad(), m.fc2_bias.grad()};
}

}  // namespace

TEST_CASE("experts: every token through its top-k experts, as written out by hand", "[backend][moe]") {
  for (bool swiglu : {false, true}) {
    INFO("swiglu " << swiglu);
    const ExpertShape s = shape(swiglu, 2.0);  // capacity N: nothing dropped
    const Whole w = whole(s);
    ExpertMLPImpl m(s);
    load(m, w, 0);
    const torch::Tensor x = batch(0);
    const torch::Tensor out = m.forward(x).reshape({-1, 8});
    const torch::Tensor tokens = x.reshape({-1, 8});
    for (std::int64_t n = 0; n < tokens.size(0); ++n)
      CHECK(torch::allclose(out[n], reference_token(w, s, tokens[n]), 1e-5, 1e-6));
  }
}

TEST_CASE("experts: a copy beyond an expert's capacity is dropped, in token order", "[backend][moe]") {
  ExpertShape s = shape(false, 1.0);
  s.experts_per_token = 1;  // 10 tokens, 4 experts: 3 rows each (ceil 2.5)
  ExpertMLPImpl m(s);
  CHECK(m.capacity(10) == 3);
  load(m, whole(s), 0);
  {
    torch::NoGradGuard no_grad;
    m.router.zero_();
    m.router[2][0] = 1.0;  // every token whose first feature is positive goes to expert 2
  }
  torch::Tensor x = torch::ones({1, 10, 8});
  const torch::Tensor out = m.forward(x).reshape({10, 8});
  // All ten pick expert 2: the first three get its result, the others nothing.
  for (int n = 0; n < 3; ++n) CHECK(out[n].abs().sum().item<double>() > 0);
  for (int n = 3; n < 10; ++n) CHECK(out[n].abs().sum().item<double>() == 0);
}

TEST_CASE("experts: expert parallelism 2 over Gloo equals one process holding every expert", "[backend][moe]") {
  for (double cf : {1.0, 2.0}) {
    for (bool swiglu : {false, true}) {
      INFO("capacity factor " << cf << ", swiglu " << swiglu);
      const ExpertShape s = shape(swiglu, cf);
      const Whole w = whole(s);
      data();
      // One process: each rank's micro-batch through the whole model in turn.
      std::vector<Run> one;
      for (int r = 0; r < 2; ++r) {
        ExpertMLPImpl m(s);
        load(m, w, 0);
        one.push_back(run(m, r));
      }
      const std::vector<Run> ep = run_ranks(2, [&](const ExpertParallel& group) {
        ExpertMLPImpl m(s, nullptr, group);
        load(m, w, group->rank() * m.local_experts);
        Run r = run(m, group->rank());
        CHECK_NOTHROW(group->take_tally());
        return r;
      });
      for (int r = 0; r < 2; ++r) {
        INFO("rank " << r);
        CHECK(torch::allclose(ep[r].out, one[r].out, 1e-5, 1e-6));
        CHECK(torch::allclose(ep[r].input_grad, one[r].input_grad, 1e-5, 1e-6));
      }
      // The router is whole on each rank: its gradient there is its micro-batch's.
      CHECK(torch::allclose(ep[0].router_grad + ep[1].router_grad, one[0].router_grad + one[1].router_grad, 1e-5,
                            1e-6));
      // An expert's gradient on its rank covers both ranks' tokens (the exchange brings
      // them): the one process's two micro-batches' sum, for those experts.
      for (int r = 0; r < 2; ++r) {
        const torch::Tensor fc1 = (one[0].fc1_grad + one[1].fc1_grad).narrow(0, 2 * r, 2);
        const torch::Tensor fc2 = (one[0].fc2_grad + one[1].fc2_grad).narrow(0, 2 * r, 2);
        const torch::Tensor b2 = (one[0].fc2_bias_grad + one[1].fc2_bias_grad).narrow(0, 2 * r, 2);
        CHECK(torch::allclose(ep[r].fc1_grad, fc1, 1e-5, 1e-6));
        CHECK(torch::allclose(ep[r].fc2_grad, fc2, 1e-5, 1e-6));
        CHECK(torch::allclose(ep[r].fc2_bias_grad, b2, 1e-5, 1e-6));
      }
    }
  }
}

TEST_CASE("experts: two exchanges forward and two backward per layer", "[backend][moe]") {
  const ExpertShape s = shape(false, 1.0);
  data();
  const std::vector<int> calls = run_ranks(2, [&](const ExpertParallel& group) {
    ExpertMLPImpl m(s, nullptr, group);
    load(m, whole(s), group->rank() * m.local_experts);
    const torch::Tensor out = m.forward(batch(group->rank()));
    const int forward = group->take_tally().total();
    out.sum().backward();
    return forward * 10 + group->take_tally().total();
  });
  CHECK(calls == std::vector<int>{22, 22});
}
