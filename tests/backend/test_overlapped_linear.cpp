// Tensor-parallel communication overlap in the LibTorch backend (overlapped_linear.hpp,
// ring_exchange.hpp): the sequence-parallel collectives in chunks beside their GEMMs. The
// ranks of a tensor group run as threads of this process over c10d Gloo
// (gloo_threads.hpp). Every expectation comes from one process without a group: the
// whole GEMM on the whole input (Y = X W^T, dX = dY W, dW = dY^T X) for the chunked
// functions, and the whole model of the same seed (its loss, its gradients sliced by
// Megatron's rules) for the model built with every edge beside its GEMM; the blocking
// conjugates run beside them as a second witness (the same outputs, the same collectives
// counted).
//
// LibTorch first, then #undef CHECK (c10 defines one), then Catch (test_backend.cpp).
#include <array>
#include <map>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "partune/backend/conjugates.hpp"
#include "partune/backend/gpt_model.hpp"
#include "partune/backend/overlapped_linear.hpp"
#include "partune/backend/tensor_parallel.hpp"
#include "partune/backend/weight_gradients.hpp"
#include "gloo_threads.hpp"

#undef CHECK
#include <catch2/catch.hpp>

using namespace partune;
using namespace partune::backend;

namespace {

template <typename Body>
auto run_ranks(int degree, Body body) -> std::vector<decltype(body(TensorParallel()))> {
  return partune::test::run_gloo_ranks("overlap-group", degree, [&](auto group, int r) {
    return body(std::make_shared<TensorParallelGroup>(group, degree, r));
  });
}

constexpr int kSeq = 1;  // [batch, seq, features]

torch::Tensor part(const torch::Tensor& t, int dim, int r, int of) {
  const std::int64_t n = t.size(dim) / of;
  return t.narrow(dim, r * n, n).contiguous();
}

bool close(const torch::Tensor& a, const torch::Tensor& b) { return torch::allclose(a, b, 1e-4, 1e-5); }

// One process: Y = X W^T and, for the output gradient dY, dX = dY W and dW = dY^T X.
struct WholeGemm {
  torch::Tensor x, w, dy, y, dx, dw;
  WholeGemm(std::int64_t in, std::int64_t out, std::uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    x = torch::randn({2, 8, in}, gen);
    w = torch::randn({out, in}, gen);
    dy = torch::randn({2, 8, out}, gen);
    torch::Tensor xr = x.clone().requires_grad_(true), wr = w.clone().requires_grad_(true);
    y = torch::nn::functional::linear(xr, wr);
    y.backward(dy);
    y = y.detach();
    dx = xr.grad();
    dw = wr.grad();
  }
};

// What one rank's layer gave: output, input and weight gradients, its collectives by pass.
struct LayerRun {
  torch::Tensor y, dx, dw;
  TensorCalls forward, backward;
};

template <typename Layer>
LayerRun run_layer(const TensorParallel& tp, const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& dy,
                   Layer layer) {
  torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  LayerRun run;
  tp->take_tally();
  const torch::Tensor y = layer(x, w);
  run.forward = tp->take_tally();
  y.backward(dy);
  run.backward = tp->take_tally();
  run.y = y.detach();
  run.dx = x.grad();
  run.dw = w.grad();
  return run;
}

// The same collectives, kind by kind.
bool same_calls(const TensorCalls& a, const TensorCalls& b) { return a.calls == b.calls; }

constexpr int kAllGather = static_cast<int>(CollectiveKind::all_gather);
constexpr int kReduceScatter = static_cast<int>(CollectiveKind::reduce_scatter);

// Turns the split backward (zero-bubble schedules) on for one section.
struct SplitOn {
  explicit SplitOn(bool on) { set_split_backward(on); }
  ~SplitOn() { set_split_backward(false); }
};

}  // namespace

TEST_CASE("tp_comm_overlap: the chunked all-gather + column-parallel GEMM is the whole GEMM's rank part",
          "[backend][tensor][tp_overlap]") {
  for (bool split : {false, true})
    for (int t : {2, 4}) {
      const WholeGemm whole(12, 16, 11);
      SplitOn on(split);  // with no store open, a split backward computes dW at once
      // Rank r: its sequence shard of X in, its output columns (W's rows) out.
      const auto runs = run_ranks(t, [&](const TensorParallel& tp) {
        const int r = tp->rank();
        const torch::Tensor shard = part(whole.x, kSeq, r, t), w = part(whole.w, 0, r, t), dy = part(whole.dy, 2, r, t);
        auto chunked = [&](const torch::Tensor& x, const torch::Tensor& wt) { return chunked_gather_linear(x, wt, tp); };
        auto blocking = [&](const torch::Tensor& x, const torch::Tensor& wt) {
          return enter_region(x, wt, torch::Tensor(), Conjugate::sp_gather, tp);
        };
        return std::make_pair(run_layer(tp, shard, w, dy, chunked), run_layer(tp, shard, w, dy, blocking));
      });
      for (int r = 0; r < t; ++r) {
        INFO("degree " << t << ", rank " << r << (split ? ", split backward" : ""));
        const LayerRun &c = runs[r].first, &b = runs[r].second;
        CHECK(close(c.y, part(whole.y, 2, r, t)));    // every position, the rank's columns, in token order
        CHECK(close(c.dx, part(whole.dx, kSeq, r, t)));  // the rank's positions, summed over the ranks
        CHECK(close(c.dw, part(whole.dw, 0, r, t)));
        CHECK(close(c.y, b.y));
        // One all-gather forward; a reduce-scatter and the re-gather backward: the blocking
        // conjugate's collectives, which the program's instructions stand for.
        CHECK(c.forward.calls[kAllGather] == 1);
        CHECK(c.backward.calls[kReduceScatter] == 1);
        CHECK(c.backward.calls[kAllGather] == 1);
        CHECK(same_calls(c.forward, b.forward));
        CHECK(same_calls(c.backward, b.backward));
      }
    }
}

TEST_CASE("tp_comm_overlap: the chunked row-parallel GEMM + reduce-scatter is the whole GEMM's shard",
          "[backend][tensor][tp_overlap]") {
  for (bool split : {false, true})
    for (int t : {2, 4}) {
      const WholeGemm whole(16, 12, 13);
      SplitOn on(split);
      // Rank r: its input columns (W's columns) over every position in, its sequence shard out.
      const auto runs = run_ranks(t, [&](const TensorParallel& tp) {
        const int r = tp->rank();
        const torch::Tensor x = part(whole.x, 2, r, t), w = part(whole.w, 1, r, t), dy = part(whole.dy, kSeq, r, t);
        auto chunked = [&](const torch::Tensor& xi, const torch::Tensor& wt) { return chunked_linear_scatter(xi, wt, tp); };
        auto blocking = [&](const torch::Tensor& xi, const torch::Tensor& wt) {
          return project_out_of_region(xi, wt, Conjugate::sp_scatter, tp);
        };
        return std::make_pair(run_layer(tp, x, w, dy, chunked), run_layer(tp, x, w, dy, blocking));
      });
      for (int r = 0; r < t; ++r) {
        INFO("degree " << t << ", rank " << r << (split ? ", split backward" : ""));
        const LayerRun &c = runs[r].first, &b = runs[r].second;
        CHECK(close(c.y, part(whole.y, kSeq, r, t)));  // the sum over the ranks, the rank's positions
        CHECK(close(c.dx, part(whole.dx, 2, r, t)));
        CHECK(close(c.dw, part(whole.dw, 1, r, t)));
        CHECK(close(c.y, b.y));
        CHECK(c.forward.calls[kReduceScatter] == 1);
        CHECK(c.backward.calls[kAllGather] == 1);
        CHECK(same_calls(c.forward, b.forward));
        CHECK(same_calls(c.backward, b.backward));
      }
    }
}

// ---- the whole model with every sequence-parallel edge beside its GEMM ------------------

namespace {

ModelSpec gpt_config(bool tied) {
  ModelSpec c;  // GPT's block (ModelSpec's defaults)
  c.layers = 2;
  c.hidden = 32;
  c.heads = c.kv_heads = 4;
  c.ffn_hidden = 64;
  c.vocab = 64;
  c.seq_len = 8;
  c.tied_embeddings = tied;
  return c;
}

// Sequence parallelism, with or without its edges beside their GEMMs (as layer_conjugates
// reads tp_comm_overlap from the layer plan: a dense layer's four edges and the head's entry).
ModelShard sequence_parallel(const TensorParallel& tp, bool beside_gemm) {
  ModelShard s;
  s.tensor = tp;
  s.conjugates = LayerConjugates::sequence_parallel();
  LayerConjugates::BesideGemm& b = s.conjugates.beside_gemm;
  b.attention_in = b.attention_out = b.mlp_in = b.mlp_out = b.head_in = beside_gemm;
  return s;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The part of the whole model's `name` that rank r of t holds (Megatron's split of GPT's
// block): QKV's rows of the rank's heads in each of q, k and v; fc1's, the embedding's and
// the head's rows; the row-parallel weights' input columns; the rest whole.
torch::Tensor expected_part(const std::string& name, const torch::Tensor& w, const ModelSpec& c, int t, int r) {
  if (ends_with(name, "qkv.weight") || ends_with(name, "qkv.bias")) {
    std::vector<torch::Tensor> rows;
    for (int p = 0; p < 3; ++p) rows.push_back(part(w.narrow(0, p * c.hidden, c.hidden), 0, r, t));
    return torch::cat(rows);
  }
  if (ends_with(name, "proj.weight") || ends_with(name, "fc2.weight")) return part(w, 1, r, t);
  if (ends_with(name, "fc1.weight") || ends_with(name, "fc1.bias") || name == "wte" || name == "lm_head.weight")
    return part(w, 0, r, t);
  return w;
}

struct ModelRun {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
  TensorCalls forward, backward;
};

ModelRun train_step(const ModelSpec& c, const ModelShard& shard, const torch::Tensor& tokens,
                    const torch::Tensor& targets) {
  GPTModel m(c, 5, shard);
  ModelRun run;
  torch::Tensor x = m->embed(tokens);
  for (int l = 0; l < c.layers; ++l) x = m->layer(l, x);
  const torch::Tensor loss = m->head_loss(x, targets);
  run.forward = shard.tensor->take_tally();
  loss.backward();
  run.backward = shard.tensor->take_tally();
  for (torch::Tensor& p : m->sequence_parallel_parameters()) {  // the executor's sum before the optimizer
    torch::Tensor g = p.grad().contiguous();
    shard.tensor->sum_gradients(g);
    p.mutable_grad() = g;
  }
  run.loss = loss.item<double>();
  for (const auto& p : m->named_parameters()) run.grads[p.key()] = p.value().grad().clone();
  return run;
}

}  // namespace

TEST_CASE("tp_comm_overlap: the model's loss and every gradient equal the whole model's",
          "[backend][tensor][sequence][tp_overlap]") {
  for (bool tied : {true, false})
    for (int t : {2, 4}) {
      const ModelSpec c = gpt_config(tied);
      at::Generator gen = at::detail::createCPUGenerator(3);
      const torch::Tensor seq = torch::randint(0, c.vocab, {3, c.seq_len + 1}, gen, torch::kLong);
      const torch::Tensor tokens = seq.slice(1, 0, c.seq_len).contiguous(), targets = seq.slice(1, 1).contiguous();
      GPTModel full(c, 5);  // one process
      const torch::Tensor full_loss = full->forward(tokens, targets);
      full_loss.backward();
      std::map<std::string, torch::Tensor> whole;
      for (const auto& p : full->named_parameters()) whole[p.key()] = p.value().grad();

      const auto runs = run_ranks(t, [&](const TensorParallel& tp) {
        return std::make_pair(train_step(c, sequence_parallel(tp, true), tokens, targets),
                              train_step(c, sequence_parallel(tp, false), tokens, targets));
      });
      for (int r = 0; r < t; ++r) {
        INFO((tied ? "tied" : "untied") << ", degree " << t << ", rank " << r);
        const ModelRun &overlapped = runs[r].first, &blocking = runs[r].second;
        CHECK(overlapped.loss == Approx(full_loss.item<double>()).epsilon(1e-5));
        // The same collectives as the blocking conjugates, kind by kind, in each pass.
        CHECK(same_calls(overlapped.forward, blocking.forward));
        CHECK(same_calls(overlapped.backward, blocking.backward));
        // Beside their GEMMs: every all-gather (the layers' entries and the head's, forward;
        // their re-gathers and the exits' gradient gathers, backward) but the embedding
        // exit's gradient gather; every reduce-scatter but the embedding exit's forward.
        CHECK(overlapped.forward.beside_gemm_calls[kAllGather] == overlapped.forward.calls[kAllGather]);
        CHECK(overlapped.forward.beside_gemm_calls[kReduceScatter] == overlapped.forward.calls[kReduceScatter] - 1);
        CHECK(overlapped.backward.beside_gemm_calls[kAllGather] == overlapped.backward.calls[kAllGather] - 1);
        CHECK(overlapped.backward.beside_gemm_calls[kReduceScatter] == overlapped.backward.calls[kReduceScatter]);
        CHECK(blocking.forward.beside_gemm_calls == std::array<int, TensorCalls::kKinds>{});
        REQUIRE(overlapped.grads.size() == whole.size());
        for (const auto& [name, grad] : whole) {
          const torch::Tensor expected = expected_part(name, grad, c, t, r);
          INFO(name << ": largest difference " << (overlapped.grads.at(name) - expected).abs().max().item<double>());
          CHECK(close(overlapped.grads.at(name), expected));
        }
      }
    }
}
