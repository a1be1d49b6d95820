// Tensor parallelism in the LibTorch backend (tensor_parallel.hpp, parallel_linear.hpp,
// gpt_model.hpp): the ranks of a tensor group run as threads of this process, each with
// its own c10d Gloo process group over one shared HashStore (a prefix per group). Every
// expectation comes from the whole (unsharded) model of the same seed: its parameters
// sliced by Megatron's rules (written out here index by index), its loss, its gradients,
// and LibTorch's cross_entropy on the whole logits.
//
// LibTorch first, then #undef CHECK (c10 defines one), then Catch (test_backend.cpp).
#include <atomic>
#include <chrono>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include "partune/backend/conjugates.hpp"
#include "partune/backend/gpt_model.hpp"
#include "partune/backend/memory_accounting.hpp"
#include "partune/backend/tensor_parallel.hpp"
#include "gloo_threads.hpp"

#undef CHECK
#include <catch2/catch.hpp>

using namespace partune::backend;
using partune::ModelSpec;

namespace {

// Runs body(tp) on `degree` threads, one per rank of a fresh tensor group, and returns
// their results in rank order (gloo_threads.hpp).
template <typename Body>
auto run_ranks(int degree, Body body) -> std::vector<decltype(body(TensorParallel()))> {
  return partune::test::run_gloo_ranks("tensor-group", degree, [&](auto group, int r) {
    return body(std::make_shared<TensorParallelGroup>(group, degree, r));
  });
}

// Every layer, the embedding and the head, split over `tp`.
ModelShard whole_model(const TensorParallel& tp) {
  ModelShard s;
  s.tensor = tp;
  return s;
}

ModelSpec small_config(bool tied) {
  ModelSpec c;  // GPT's block (ModelSpec's defaults)
  c.layers = 2;
  c.hidden = 32;
  c.heads = c.kv_heads = 4;
  c.ffn_hidden = 128;
  c.vocab = 64;
  c.seq_len = 8;
  c.tied_embeddings = tied;
  return c;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

torch::Tensor range_index(std::int64_t begin, std::int64_t end) { return torch::arange(begin, end, torch::kLong); }

// The part of the whole model's tensor `name` that rank r of t holds, written out index by
// index from Megatron's split.
torch::Tensor expected_part(const std::string& name, const torch::Tensor& w, const ModelSpec& c, int t, int r) {
  if (ends_with(name, "qkv.weight") || ends_with(name, "qkv.bias")) {
    // Rows of [q; k; v] (each [hidden, .], head j at rows j d .. j d + d - 1) for the
    // rank's heads, q's first, then k's, then v's.
    const std::int64_t d = c.hidden / c.heads, local = c.heads / t;
    std::vector<std::int64_t> index;
    for (int p = 0; p < 3; ++p)
      for (std::int64_t j = r * local; j < (r + 1) * local; ++j)
        for (std::int64_t e = 0; e < d; ++e) index.push_back(p * c.hidden + j * d + e);
    return w.index_select(0, torch::tensor(index, torch::kLong));
  }
  if (ends_with(name, "proj.weight") || ends_with(name, "fc2.weight")) {  // row-parallel: input columns
    const std::int64_t n = w.size(1) / t;
    return w.index_select(1, range_index(r * n, (r + 1) * n));
  }
  if (ends_with(name, "fc1.weight") || ends_with(name, "fc1.bias") || name == "wte" || name == "lm_head.weight") {
    const std::int64_t n = w.size(0) / t;  // column-parallel output rows, vocabulary rows
    return w.index_select(0, range_index(r * n, (r + 1) * n));
  }
  return w;  // replicated: wpe, LayerNorms, the row-parallel biases
}

std::map<std::string, torch::Tensor> values_of(GPTModel& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

std::map<std::string, torch::Tensor> grads_of(GPTModel& m) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : m->named_parameters()) out[p.key()] = p.value().grad().clone();
  return out;
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// A fixed batch of tokens and next-token targets.
std::pair<torch::Tensor, torch::Tensor> batch(const ModelSpec& c, std::uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const torch::Tensor t = torch::randint(0, c.vocab, {3, c.seq_len + 1}, gen, torch::kLong);
  return {t.slice(1, 0, c.seq_len).contiguous(), t.slice(1, 1, c.seq_len + 1).contiguous()};
}

struct RankRun {
  double loss = 0;
  std::map<std::string, torch::Tensor> values, grads;
  int collectives = 0;
};

}  // namespace

TEST_CASE("tensor parallel: f is identity forward and sums gradients, g sums forward", "[backend][tensor]") {
  const std::vector<std::vector<torch::Tensor>> out = run_ranks(2, [](const TensorParallel& tp) {
    const double r = tp->rank() + 1;  // rank 0 holds 1s, rank 1 holds 2s
    const torch::Tensor x = torch::full({2, 3}, r).requires_grad_(true);
    const torch::Tensor fx = copy_to_tensor_region(x, tp);
    const torch::Tensor gx = reduce_from_tensor_region(x.detach(), tp);
    (fx * r).sum().backward();  // local gradient r; f's backward sums it over the ranks
    const int calls = tp->take_calls();
    const double seconds = tp->take_seconds();
    return std::vector<torch::Tensor>{fx.detach().clone(), gx, x.grad().clone(), torch::tensor({double(calls)}),
                                      torch::tensor({seconds}), torch::tensor({double(tp->take_calls())})};
  });
  for (int r = 0; r < 2; ++r) {
    const auto& o = out[static_cast<std::size_t>(r)];
    CHECK(torch::equal(o[0], torch::full({2, 3}, r + 1.0)));
    CHECK(torch::equal(o[1], torch::full({2, 3}, 3.0)));
    CHECK(torch::equal(o[2], torch::full({2, 3}, 3.0)));
    CHECK(o[3].item<double>() == 2);  // g's forward, f's backward
    CHECK(o[4].item<double>() >= 0);
    CHECK(o[5].item<double>() == 0);  // taken
  }
  // Degree 1 (no group): both are the identity.
  const torch::Tensor x = torch::randn({4});
  CHECK(copy_to_tensor_region(x, nullptr).is_same(x));
  CHECK(reduce_from_tensor_region(x, nullptr).is_same(x));
  CHECK(tensor_slice(12, 3, 2, "heads").begin == 8);
  CHECK(tensor_slice(12, 3, 2, "heads").size == 4);
}

// The unsharded model keeps the single-rank backend's parameters: registration order
// (names) and values drawn in that order from the seed's generator, N(0, 0.02) weights,
// N(0, 0.02 / sqrt(2 layers)) for proj and fc2, biases 0, LayerNorms 1 and 0.
TEST_CASE("tensor parallel: the whole model keeps the registration-order initialisation", "[backend][tensor]") {
  for (bool tied : {true, false}) {
    const ModelSpec c = small_config(tied);
    GPTModel m(c, 7);
    std::vector<std::string> expected_names{"wte", "wpe"};
    for (int l = 0; l < c.layers; ++l)
      for (const char* n : {"ln1.weight", "ln1.bias", "attention.qkv.weight", "attention.qkv.bias",
                            "attention.proj.weight", "attention.proj.bias", "ln2.weight", "ln2.bias", "mlp.fc1.weight",
                            "mlp.fc1.bias", "mlp.fc2.weight", "mlp.fc2.bias"})
        expected_names.push_back("layers." + std::to_string(l) + "." + n);
    expected_names.push_back("ln_f.weight");
    expected_names.push_back("ln_f.bias");
    if (!tied) expected_names.push_back("lm_head.weight");
    std::vector<std::string> names;
    for (const auto& p : m->named_parameters()) names.push_back(p.key());
    CHECK(names == expected_names);

    at::Generator gen = at::detail::createCPUGenerator(7);
    for (const auto& p : m->named_parameters()) {
      const std::string& name = p.key();
      torch::Tensor expected = torch::empty(p.value().sizes());
      if (name.find("ln") != std::string::npos && expected.dim() == 1) expected.fill_(ends_with(name, "weight") ? 1.0 : 0.0);
      else if (ends_with(name, "bias")) expected.zero_();
      else if (ends_with(name, "proj.weight") || ends_with(name, "fc2.weight")) expected.normal_(0.0, 0.02 / 2.0, gen);
      else expected.normal_(0.0, 0.02, gen);
      INFO(name);
      CHECK(torch::equal(p.value(), expected));
    }
  }
}

TEST_CASE("tensor parallel: each shard holds its slices of the whole model's initial values", "[backend][tensor]") {
  for (bool tied : {true, false})
    for (int t : {2, 4}) {
      const ModelSpec c = small_config(tied);
      GPTModel full(c, 11);
      const std::map<std::string, torch::Tensor> whole = values_of(full);
      const auto shards = run_ranks(t, [&](const TensorParallel& tp) {
        GPTModel m(c, 11, whole_model(tp));
        return values_of(m);
      });
      for (int r = 0; r < t; ++r) {
        const auto& held = shards[static_cast<std::size_t>(r)];
        REQUIRE(held.size() == whole.size());
        for (const auto& [name, value] : whole) {
          INFO((tied ? "tied" : "untied") << ", degree " << t << ", rank " << r << ": " << name);
          REQUIRE(held.count(name) == 1);
          CHECK(torch::equal(held.at(name), expected_part(name, value, c, t, r)));
        }
      }
    }
}

TEST_CASE("tensor parallel: the loss and every gradient equal the whole model's", "[backend][tensor]") {
  for (bool tied : {true, false})
    for (int t : {2, 4}) {
      const ModelSpec c = small_config(tied);
      const std::pair<torch::Tensor, torch::Tensor> data = batch(c, 3);
      const torch::Tensor tokens = data.first, targets = data.second;  // captured below (C++17)
      GPTModel full(c, 5);
      const torch::Tensor full_loss = full->forward(tokens, targets);
      full_loss.backward();
      const std::map<std::string, torch::Tensor> whole = grads_of(full);

      const std::vector<RankRun> runs = run_ranks(t, [&](const TensorParallel& tp) {
        GPTModel m(c, 5, whole_model(tp));
        // The executor's calls: embed, each layer, head_loss.
        torch::Tensor x = m->embed(tokens);
        for (int l = 0; l < c.layers; ++l) x = m->layer(l, x);
        const torch::Tensor loss = m->head_loss(x, targets);
        loss.backward();
        RankRun run;
        run.loss = loss.item<double>();
        run.grads = grads_of(m);
        run.collectives = tp->take_calls();
        return run;
      });
      for (int r = 0; r < t; ++r) {
        const RankRun& run = runs[static_cast<std::size_t>(r)];
        INFO((tied ? "tied" : "untied") << ", degree " << t << ", rank " << r);
        CHECK(run.loss == Approx(full_loss.item<double>()).epsilon(1e-5));
        // Forward: g after the embedding, proj and fc2 of each layer, three in the loss;
        // backward: f before QKV and fc1 of each layer and before the head.
        CHECK(run.collectives == 1 + 2 * c.layers + 3 + 2 * c.layers + 1);
        REQUIRE(run.grads.size() == whole.size());
        for (const auto& [name, grad] : whole) {
          const torch::Tensor expected = expected_part(name, grad, c, t, r);
          INFO(name << ": largest difference " << max_difference(run.grads.at(name), expected));
          CHECK(torch::allclose(run.grads.at(name), expected, /*rtol=*/1e-5, /*atol=*/1e-6));
        }
      }
    }
}

TEST_CASE("tensor parallel: vocabulary-parallel cross-entropy equals cross_entropy on the whole logits",
          "[backend][tensor]") {
  at::Generator gen = at::detail::createCPUGenerator(21);
  const std::int64_t tokens = 12, vocab = 20;
  const torch::Tensor logits = torch::randn({tokens, vocab}, gen) * 4.0;
  torch::Tensor targets = torch::randint(0, vocab, {tokens}, gen, torch::kLong);
  targets[0] = 0;
  targets[1] = vocab - 1;  // both ends of the vocabulary
  const torch::Tensor whole = logits.clone().requires_grad_(true);
  const torch::Tensor expected = torch::nn::functional::cross_entropy(whole, targets);
  (expected * 0.7).backward();
  for (int t : {2, 4}) {
    const auto out = run_ranks(t, [&](const TensorParallel& tp) {
      const std::int64_t n = vocab / t;
      const torch::Tensor local = logits.slice(1, tp->rank() * n, (tp->rank() + 1) * n).clone().requires_grad_(true);
      const torch::Tensor loss = vocab_parallel_cross_entropy(local, targets, tp);
      (loss * 0.7).backward();
      return std::make_pair(loss.item<double>(), local.grad().clone());
    });
    for (int r = 0; r < t; ++r) {
      INFO("degree " << t << ", rank " << r);
      const auto& [loss, grad] = out[static_cast<std::size_t>(r)];
      CHECK(loss == Approx(expected.item<double>()).epsilon(1e-6));
      const std::int64_t n = vocab / t;
      CHECK(torch::allclose(grad, whole.grad().slice(1, r * n, (r + 1) * n), 1e-5, 1e-7));
    }
  }
}

TEST_CASE("tensor parallel: a pipeline head stage keeps its own copy of the tied embedding", "[backend][tensor]") {
  const ModelSpec c = small_config(/*tied=*/true);
  GPTModel full(c, 9);
  const std::map<std::string, torch::Tensor> whole = values_of(full);

  ModelShard first;
  first.layers = {0};
  first.head = false;
  ModelShard last;
  last.layers = {1};
  last.embedding = false;
  GPTModel stage0(c, 9, first), stage1(c, 9, last);
  CHECK(stage0->holds_layer(0));
  CHECK_FALSE(stage0->holds_layer(1));
  CHECK(stage1->holds_layer(1));
  CHECK_FALSE(stage1->holds_layer(0));
  CHECK_FALSE(stage1->wpe.defined());
  REQUIRE(stage1->wte.defined());
  CHECK(torch::equal(stage1->wte, whole.at("wte")));
  for (const auto& [name, value] : values_of(stage1)) {
    INFO(name);
    CHECK(torch::equal(value, whole.at(name)));
  }
  CHECK(stage0->head_parameters().empty());
  CHECK(stage1->embedding_parameters().empty());
  CHECK(stage1->head_parameters().size() == 3);  // ln_f weight, bias, the wte copy
  CHECK(stage1->head_parameters()[2].is_same(stage1->wte));

  // The two stages run the whole model: stage 0's output into stage 1 gives its loss.
  const auto [tokens, targets] = batch(c, 4);
  const double expected = full->forward(tokens, targets).item<double>();
  const torch::Tensor handoff = stage0->layer(0, stage0->embed(tokens)).detach();
  CHECK(stage1->head_loss(stage1->layer(1, handoff), targets).item<double>() == Approx(expected).epsilon(1e-6));
  CHECK_THROWS_WITH(stage1->embed(tokens), Catch::Contains("embedding"));
  CHECK_THROWS_WITH(stage1->layer(0, handoff), Catch::Contains("layer 0"));

  // Split over two ranks: each head stage holds its vocabulary rows of the whole wte.
  const auto copies = run_ranks(2, [&](const TensorParallel& tp) {
    ModelShard s = last;
    s.tensor = tp;
    GPTModel m(c, 9, s);
    return m->wte.detach().clone();
  });
  for (int r = 0; r < 2; ++r) CHECK(torch::equal(copies[static_cast<std::size_t>(r)], expected_part("wte", whole.at("wte"), c, 2, r)));
}

TEST_CASE("tensor parallel: every held parameter is in exactly one part's list", "[backend][tensor]") {
  for (bool tied : {true, false}) {
    const ModelSpec c = small_config(tied);
    std::vector<ModelShard> shards(4);
    shards[1].layers = {0};
    shards[1].head = false;
    shards[2].layers = {1};
    shards[2].embedding = false;
    shards[3].layers = {1};
    shards[3].embedding = false;
    shards[3].head = false;
    for (const ModelShard& s : shards) {
      GPTModel m(c, 1, s);
      std::multiset<const void*> listed;
      auto add = [&](const std::vector<torch::Tensor>& ps) {
        for (const torch::Tensor& p : ps) listed.insert(p.unsafeGetTensorImpl());
      };
      add(m->embedding_parameters());
      add(m->head_parameters());
      for (int l = 0; l < c.layers; ++l)
        if (m->holds_layer(l)) add(m->layer_parameters(l));
      std::multiset<const void*> held;
      for (const torch::Tensor& p : m->parameters()) held.insert(p.unsafeGetTensorImpl());
      INFO((tied ? "tied" : "untied") << ", embedding " << s.embedding << ", head " << s.head);
      CHECK(listed == held);
      for (const void* p : held) CHECK(listed.count(p) == 1);
    }
  }
}

TEST_CASE("tensor parallel: a degree that does not divide the model's sizes is refused by name", "[backend][tensor]") {
  auto message = [](int degree, ModelSpec c) {
    const std::vector<std::string> out = run_ranks(degree, [&](const TensorParallel& tp) -> std::string {
      try {
        GPTModel m(c, 1, whole_model(tp));
      } catch (const std::invalid_argument& e) {
        return e.what();
      }
      return "no error";
    });
    return out[0];
  };
  ModelSpec c = small_config(true);
  c.hidden = 48;
  c.heads = c.kv_heads = 3;
  c.ffn_hidden = 192;
  CHECK(message(2, c) == "tensor degree 2 does not divide heads 3");
  c = small_config(true);
  c.ffn_hidden = 130;
  CHECK_THAT(message(4, c), Catch::Contains("tensor degree 4 does not divide ffn_hidden 130"));
  c = small_config(false);
  c.vocab = 65;
  CHECK_THAT(message(2, c), Catch::Contains("tensor degree 2 does not divide vocab 65"));

  ModelShard outside;
  outside.layers = {2};
  CHECK_THROWS_WITH(GPTModel(small_config(true), 1, outside), Catch::Contains("layer 2"));
}

// ---- sequence parallelism (Korthikanti et al. 2022) -------------------------------------

namespace {

ModelShard sequence_parallel_model(const TensorParallel& tp) {
  ModelShard s = whole_model(tp);
  s.conjugates = LayerConjugates::sequence_parallel();
  return s;
}

// Sums the gradients of the parameters used on sequence shards over the group (what the
// executor does once per step before the gradients leave the rank).
void sum_sequence_parallel_gradients(GPTModel& m, const TensorParallel& tp) {
  for (torch::Tensor& p : m->sequence_parallel_parameters()) {
    torch::Tensor g = p.grad().contiguous();
    tp->sum_gradients(g);
    p.mutable_grad() = g;
  }
}

struct SequenceRun {
  double loss = 0;
  std::map<std::string, torch::Tensor> grads;
  TensorCalls forward, backward;
  std::vector<std::int64_t> embedded_shape;
  torch::Tensor embedded;
  std::vector<std::string> summed;
};

}  // namespace

TEST_CASE("sequence parallelism: the loss and every gradient equal the whole model's", "[backend][tensor][sequence]") {
  for (bool tied : {true, false})
    for (int t : {2, 4}) {
      const ModelSpec c = small_config(tied);
      const std::pair<torch::Tensor, torch::Tensor> data = batch(c, 3);
      const torch::Tensor tokens = data.first, targets = data.second;
      GPTModel full(c, 5);
      const torch::Tensor whole_embedded = full->embed(tokens).detach();
      const torch::Tensor full_loss = full->forward(tokens, targets);
      full_loss.backward();
      const std::map<std::string, torch::Tensor> whole = grads_of(full);

      const std::vector<SequenceRun> runs = run_ranks(t, [&](const TensorParallel& tp) {
        GPTModel m(c, 5, sequence_parallel_model(tp));
        SequenceRun run;
        torch::Tensor x = m->embed(tokens);
        run.embedded = x.detach().clone();
        for (int l = 0; l < c.layers; ++l) x = m->layer(l, x);
        const torch::Tensor loss = m->head_loss(x, targets);
        run.forward = tp->take_tally();
        loss.backward();
        run.backward = tp->take_tally();
        sum_sequence_parallel_gradients(m, tp);
        run.loss = loss.item<double>();
        run.grads = grads_of(m);
        for (const auto& p : m->named_parameters())
          for (const torch::Tensor& q : m->sequence_parallel_parameters())
            if (q.is_same(p.value())) run.summed.push_back(p.key());
        return run;
      });
      const int L = c.layers;
      const std::int64_t shard = c.seq_len / t;
      for (int r = 0; r < t; ++r) {
        const SequenceRun& run = runs[static_cast<std::size_t>(r)];
        INFO((tied ? "tied" : "untied") << ", degree " << t << ", rank " << r);
        CHECK(run.loss == Approx(full_loss.item<double>()).epsilon(1e-5));
        // The embedding's output is this rank's positions [r s/t, (r + 1) s/t) of the whole.
        CHECK(torch::allclose(run.embedded, whole_embedded.narrow(1, r * shard, shard), 1e-5, 1e-6));
        // Forward: per layer 2 all-gathers (entering attention and the MLP) and 2
        // reduce-scatters (leaving them); the embedding's reduce-scatter; the head's
        // all-gather; the loss's 3 all-reduces.
        CHECK(run.forward.calls[0] == 3);
        CHECK(run.forward.calls[1] == 2 * L + 1);
        CHECK(run.forward.calls[2] == 2 * L + 1);
        // Backward: per layer 2 reduce-scatters (the gathers' conjugates), 2 all-gathers of
        // gradients (the scatters' conjugates) and 2 re-gathers of the GEMM inputs; the
        // head's reduce-scatter and re-gather; the embedding's all-gather.
        CHECK(run.backward.calls[0] == 0);
        CHECK(run.backward.calls[1] == 4 * L + 2);
        CHECK(run.backward.calls[2] == 2 * L + 1);
        // Summed over the group: the LayerNorms, the row-parallel biases, the positions.
        std::set<std::string> expected_summed{"wpe", "ln_f.weight", "ln_f.bias"};
        for (int l = 0; l < L; ++l)
          for (const char* n : {"ln1.weight", "ln1.bias", "attention.proj.bias", "ln2.weight", "ln2.bias", "mlp.fc2.bias"})
            expected_summed.insert("layers." + std::to_string(l) + "." + n);
        CHECK(std::set<std::string>(run.summed.begin(), run.summed.end()) == expected_summed);
        REQUIRE(run.grads.size() == whole.size());
        for (const auto& [name, grad] : whole) {
          const torch::Tensor expected = expected_part(name, grad, c, t, r);
          INFO(name << ": largest difference " << max_difference(run.grads.at(name), expected));
          CHECK(torch::allclose(run.grads.at(name), expected, /*rtol=*/1e-5, /*atol=*/1e-6));
        }
      }
    }
}

// What autograd keeps per layer, measured with the CPU byte accounting, against the
// backend's own layer written out by hand (fp32, no dropout: Korthikanti's table 2 counts
// fp16 activations and dropout masks, so its 34 and 24 do not apply as such). Per layer,
// in elements, with b sequences of s tokens, hidden h, a heads over t ranks:
//   the LayerNorms' inputs (2) and the column-parallel GEMMs' inputs (2): 4sbh, or 4sbh/t
//     with sequence parallelism (the shards; the GEMMs re-gather theirs in backward);
//   QKV's output 3sbh/t, the attention context 1sbh/t, fc1's output (GeLU's input) 4sbh/t
//     and GeLU's output 4sbh/t: 12sbh/t either way;
//   the softmax output a s^2 b / t.
// Without sequence parallelism 4sbh + 12sbh/t + as^2b/t, with it 16sbh/t + as^2b/t.
TEST_CASE("sequence parallelism: activation bytes per layer are the shards'", "[backend][tensor][sequence][memory]") {
  install_cpu_memory_accounting();
  ModelSpec c = small_config(true);
  c.layers = 4;
  c.hidden = 64;
  c.heads = c.kv_heads = 2;
  c.ffn_hidden = 256;
  c.seq_len = 32;
  const int t = 2;
  const std::int64_t b = 3, s = c.seq_len, h = c.hidden, a = c.heads;
  const torch::Tensor input = torch::randn({b, s, h});
  std::map<std::pair<bool, bool>, double> per_layer;  // (sequence parallel, selective)
  const std::pair<bool, bool> passes[] = {{false, false}, {false, true}, {true, false}, {true, true}};
  // Gloo's threads drop their last references to a collective's tensors a moment after
  // the collective returns: the counter is read once it has stopped moving.
  const auto settled_bytes = [] {
    std::int64_t before = cpu_tensor_bytes_in_use();
    for (int i = 0; i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const std::int64_t now = cpu_tensor_bytes_in_use();
      if (now == before) break;
      before = now;
    }
    return before;
  };
  for (const auto& [sp, selective] : passes) {
    // Each rank runs the layers from its input (a leaf requiring grad, as the executor's
    // parts, held by the graph alone) and keeps the graph; the bytes it holds are those
    // released with it.
    struct Held {
      GPTModel model{nullptr};
      torch::Tensor output, kept;
      SelectiveRecompute cores;
    };
    std::vector<Held> held = run_ranks(t, [&](const TensorParallel& tp) {
      Held k;
      k.model = GPTModel(c, 5, sp ? sequence_parallel_model(tp) : whole_model(tp));
      const Slice part = sequence_slice(s, tp);
      torch::Tensor x = (sp ? input.narrow(1, part.begin, part.size) : input).clone().requires_grad_(true);
      std::unique_ptr<SelectiveRecompute::Scope> scope;
      if (selective) scope = std::make_unique<SelectiveRecompute::Scope>(k.cores);
      for (int l = 0; l < c.layers; ++l) x = k.model->layer(l, x);
      k.output = x;
      k.kept = x.detach();  // the output's storage outlives the graph: not counted
      return k;
    });
    const std::int64_t with_graphs = settled_bytes();
    for (Held& k : held) {
      k.output = torch::Tensor();
      k.cores.clear();  // Q, K, V of the checkpointed cores: part of what the layers keep
    }
    const std::int64_t without = settled_bytes();
    per_layer[{sp, selective}] = static_cast<double>(with_graphs - without) / t / c.layers;
  }
  const double sbh = static_cast<double>(s * b * h), scores = static_cast<double>(a * s * s * b) / t;
  const double expected_plain = 4.0 * (4 * sbh + 12 * sbh / t + scores);
  const double expected_sp = 4.0 * (16 * sbh / t + scores);
  const double plain = per_layer[{false, false}], with_sp = per_layer[{true, false}];
  const double selective = per_layer[{false, true}], selective_sp = per_layer[{true, true}];
  INFO("bytes per layer: " << plain << " without sequence parallelism (expected " << expected_plain << "), "
                           << with_sp << " with (expected " << expected_sp << "), ratio " << with_sp / plain
                           << "; selective " << selective << ", " << selective_sp);
  // Small saved tensors beside these (the causal mask, the LayerNorms' means and
  // inverse deviations) stay within 2%.
  CHECK(plain == Approx(expected_plain).epsilon(0.02));
  CHECK(with_sp == Approx(expected_sp).epsilon(0.02));
  CHECK(with_sp / plain == Approx(expected_sp / expected_plain).epsilon(0.02));
  // Selective recomputation keeps everything but the attention probabilities (4 bytes a
  // score): Korthikanti et al.'s 5as/(ht) term, gone.
  CHECK(selective == Approx(expected_plain - 4.0 * scores).epsilon(0.02));
  CHECK(selective_sp == Approx(expected_sp - 4.0 * scores).epsilon(0.02));
}

// A checkpointed attention core's gradients (its own backward, from recomputed or
// backward-time probabilities) equal autograd's through the plain core.
TEST_CASE("selective recomputation: the layers' gradients equal the plain layers'", "[backend][selective]") {
  const ModelSpec c = small_config(true);
  const torch::Tensor input = torch::randn({2, c.seq_len, c.hidden}), upstream = torch::randn({2, c.seq_len, c.hidden});
  auto gradients = [&](int mode) {  // 0 plain, 1 checkpointed, 2 checkpointed and recomputed
    GPTModel m(c, 5);
    SelectiveRecompute cores;
    torch::Tensor x = input.clone().requires_grad_(true), y = x;
    {
      std::unique_ptr<SelectiveRecompute::Scope> scope;
      if (mode > 0) scope = std::make_unique<SelectiveRecompute::Scope>(cores);
      for (int l = 0; l < c.layers; ++l) y = m->layer(l, y);
    }
    CHECK(cores.size() == (mode > 0 ? static_cast<std::size_t>(c.layers) : 0u));
    if (mode == 2) cores.recompute();
    y.backward(upstream);
    std::map<std::string, torch::Tensor> g{{"input", x.grad()}};
    for (const auto& p : m->named_parameters())
      if (p.value().grad().defined()) g[p.key()] = p.value().grad();  // the layers' (the embedding and head: unused)
    return g;
  };
  const std::map<std::string, torch::Tensor> plain = gradients(0);
  CHECK(plain.size() == 1 + 12 * static_cast<std::size_t>(c.layers));  // the input and each layer's 12 tensors
  for (int mode : {1, 2})
    for (const auto& [name, g] : gradients(mode)) {
      INFO(name << (mode == 2 ? " (recomputed first)" : ""));
      CHECK(max_difference(g, plain.at(name)) <= 1e-5 * (1.0 + plain.at(name).abs().max().item<double>()));
    }
}
