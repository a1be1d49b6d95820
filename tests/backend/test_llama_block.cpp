// LLaMA-style blocks in the LibTorch backend (transformer_layer.hpp, gpt_model.hpp,
// scaled_job.hpp): SwiGLU MLP, RMSNorm, rotary positions, grouped-query and multi-query
// attention, no biases.
//   - closed forms: RMSNorm against its formula; rotary positions (the identity at
//     position 0, the rotate_half convention written out, q . k depending only on the
//     positions' difference);
//   - the parameter count against the module's and the cost model's (ModelSpec), and the
//     scaling rule keeping the block;
//   - the whole model against a hand-written LibTorch forward (loss and every gradient),
//     with the standard core, selective recomputation and FlashAttention;
//   - what a layer keeps for backward, measured with the CPU byte accounting;
//   - multi-rank `partune run` of tests/backend/data/tiny-llama.yaml (tensor 2, with and
//     without sequence parallelism, pipeline 2, data 2, sharded data 2) against the
//     one-process run: every step's loss, and every parameter each rank holds after the
//     last step (its checkpoint) against its part of the one-process run's, within 1e-4;
//   - multi-query attention: refused by name over 2 tensor ranks, trained without them.
//
// LibTorch first, then #undef CHECK (c10 defines one), then Catch (test_backend.cpp).
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include "partune/backend/checkpoint.hpp"
#include "partune/backend/gpt_model.hpp"
#include "partune/backend/memory_accounting.hpp"
#include "partune/costmodel/scaled_job.hpp"
#include "partune/backend/trainer.hpp"
#include "partune/backend/transformer_layer.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/scenario.hpp"

#undef CHECK
#include <catch2/catch.hpp>

#include "multirank_runs.hpp"

using namespace partune;
using namespace partune::backend;

namespace {

// The LLaMA block at test sizes (head dim 8).
ModelSpec llama_config(int kv_heads, bool tied = false) {
  ModelSpec c;
  c.layers = 2;
  c.hidden = 32;
  c.heads = 4;
  c.kv_heads = kv_heads;
  c.attention = kv_heads == 1 ? AttentionKind::mqa : AttentionKind::gqa;
  c.ffn_hidden = 48;
  c.vocab = 64;
  c.seq_len = 16;
  c.tied_embeddings = tied;
  c.mlp = MlpKind::swiglu;
  c.norm = NormKind::rmsnorm;
  c.positions = PositionKind::rope;
  c.bias = false;
  return c;
}

long long module_parameters(GPTModel& m) {
  long long n = 0;
  for (const auto& t : m->parameters()) n += t.numel();
  return n;
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("llama block: RMSNorm equals its formula", "[backend][llama]") {
  at::Generator gen = at::detail::createCPUGenerator(3);
  const torch::Tensor x = torch::randn({2, 5, 16}, gen) * 3.0;
  Norm norm(16, NormKind::rmsnorm);
  REQUIRE(norm->parameters().size() == 1);  // the scale alone
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::randn({16}, gen));
  }
  const torch::Tensor y = norm(x);
  // y = x / sqrt(mean(x^2) + eps) * w, token by token, in double.
  const torch::Tensor x64 = x.to(torch::kDouble), w64 = norm->weight.detach().to(torch::kDouble),
                      y64 = y.detach().to(torch::kDouble);
  const auto xs = x64.accessor<double, 3>();
  const auto w = w64.accessor<double, 1>();
  const auto ys = y64.accessor<double, 3>();
  double worst = 0;
  for (int b = 0; b < 2; ++b)
    for (int s = 0; s < 5; ++s) {
      double squares = 0;
      for (int i = 0; i < 16; ++i) squares += xs[b][s][i] * xs[b][s][i];
      const double scale = 1.0 / std::sqrt(squares / 16 + 1e-5);
      for (int i = 0; i < 16; ++i) worst = std::max(worst, std::abs(ys[b][s][i] - xs[b][s][i] * scale * w[i]));
    }
  CHECK(worst < 1e-5);
}

TEST_CASE("llama block: rotary positions follow rotate_half with theta 10000", "[backend][llama]") {
  const std::int64_t d = 8;
  const RotaryTables t = rotary_tables(64, d);
  at::Generator gen = at::detail::createCPUGenerator(5);
  const torch::Tensor x = torch::randn({d}, gen);
  const auto at_position = [&](const torch::Tensor& v, std::int64_t p) {
    return apply_rotary(v.view({1, d}), t.cos.narrow(0, p, 1), t.sin.narrow(0, p, 1)).view({d});
  };
  // Position 0 is the identity, exactly.
  CHECK(torch::equal(at_position(x, 0), x));
  // Dimension i pairs with i + d/2 and turns by p theta^(-2i/d).
  const std::int64_t p = 7;
  const auto xv = x.accessor<float, 1>();
  const torch::Tensor rotated = at_position(x, p);
  for (std::int64_t i = 0; i < d / 2; ++i) {
    const double angle = p * std::pow(10000.0, -2.0 * i / d);
    INFO("pair " << i);
    CHECK(rotated[i].item<double>() ==
          Approx(xv[i] * std::cos(angle) - xv[i + d / 2] * std::sin(angle)).margin(1e-5));
    CHECK(rotated[i + d / 2].item<double>() ==
          Approx(xv[i + d / 2] * std::cos(angle) + xv[i] * std::sin(angle)).margin(1e-5));
  }
  // q . k at positions (m, n) equals q . k at (m + o, n + o): only the offset counts.
  const torch::Tensor q = torch::randn({d}, gen), k = torch::randn({d}, gen);
  const double base = at_position(q, 9).dot(at_position(k, 4)).item<double>();
  for (std::int64_t o : {1, 13, 50}) {
    INFO("offset " << o);
    CHECK(at_position(q, 9 + o).dot(at_position(k, 4 + o)).item<double>() == Approx(base).margin(1e-5));
  }
  CHECK(std::abs(at_position(q, 9).dot(at_position(k, 9)).item<double>() - base) > 1e-3);  // the offset does count
  CHECK_THROWS_WITH(rotary_tables(4, 7), Catch::Contains("head dim 7 is odd"));
}

// The count the backend builds, the cost model's count of the same sizes, for GPT's block,
// LLaMA's (grouped-query and multi-query) and mixes of the two, tied and untied.
TEST_CASE("llama block: the module's parameters are the cost model's count", "[backend][llama]") {
  std::vector<std::pair<std::string, ModelSpec>> configs;
  for (bool tied : {true, false}) {
    ModelSpec gpt = llama_config(4, tied);
    gpt.kv_heads = gpt.heads;
    gpt.attention = AttentionKind::mha;
    gpt.mlp = MlpKind::gelu;
    gpt.norm = NormKind::layernorm;
    gpt.positions = PositionKind::learned;
    gpt.bias = true;
    configs.emplace_back("gpt", gpt);
    configs.emplace_back("llama gqa", llama_config(2, tied));
    configs.emplace_back("llama mqa", llama_config(1, tied));
    ModelSpec neox = gpt;  // GPT-NeoX: rotary positions in the GPT block
    neox.positions = PositionKind::rope;
    configs.emplace_back("gpt with rope", neox);
    ModelSpec mixed = llama_config(2, tied);  // LayerNorm and biases in a SwiGLU block
    mixed.norm = NormKind::layernorm;
    mixed.bias = true;
    configs.emplace_back("swiglu with layernorm and biases", mixed);
    ModelSpec qwen3 = llama_config(2, tied);  // Qwen3: heads of 12 over hidden 32, QK-norm
    qwen3.attention_head_dim = 12;
    qwen3.qk_norm = true;
    configs.emplace_back("qwen3 (head_dim 12, qk-norm)", qwen3);
    ModelSpec deepseek = llama_config(2, tied);  // experts from layer 1, shared experts
    deepseek.layers = 3;
    deepseek.experts = 4;
    deepseek.expert_ffn_hidden = 16;
    deepseek.shared_expert_ffn_hidden = 24;
    deepseek.first_dense_layers = 1;
    configs.emplace_back("moe with shared experts and a dense first layer", deepseek);
    ModelSpec mla = deepseek;  // and multi-head latent attention (heads of 8 + 4, values 6)
    mla.attention = AttentionKind::mla;
    mla.kv_heads = 4;
    mla.q_lora_rank = 12;
    mla.kv_lora_rank = 10;
    mla.qk_nope_head_dim = 8;
    mla.qk_rope_head_dim = 4;
    mla.v_head_dim = 6;
    configs.emplace_back("mla, shared experts, a dense first layer", mla);
    mla.q_lora_rank = 0;
    configs.emplace_back("mla without a query latent", mla);
  }
  for (const auto& [what, c] : configs) {
    INFO(what << (c.tied_embeddings ? ", tied" : ", untied") << ": " << describe_model(c));
    GPTModel m(c, 1);
    // The module the backend builds holds what the layer plans count (parameter_count.hpp)
    // for the same ModelSpec.
    CHECK(static_cast<double>(module_parameters(m)) == total_parameters(c));
  }
}

TEST_CASE("llama block: the scaling rule keeps the block", "[backend][llama]") {
  const ModelSpec big = load_model("llama-2-70b");  // 64 heads over 8 key/value heads
  const ModelSpec c = scaled_model(big, {});
  CHECK(c.heads == 4);
  CHECK(c.mlp == MlpKind::swiglu);
  CHECK(c.norm == NormKind::rmsnorm);
  CHECK(c.positions == PositionKind::rope);
  CHECK_FALSE(c.bias);
  CHECK_FALSE(c.tied_embeddings);
  CHECK(c.attention == AttentionKind::gqa);
  CHECK(c.kv_heads == 1);  // 4 x 8 / 64 rounds down to none: at least one
  // With the tensor degree as the floor, 2 tensor ranks split 2 key/value heads.
  CHECK(scaled_model(big, {}, 2).kv_heads == 2);
  CHECK_THAT(describe_model(scaled_model(big, {}, 2)), Catch::Contains("seq 32, swiglu, rmsnorm, rope, gqa 2 kv heads, no bias, "
                                                                 "untied LM head"));
  // The job the cost model is given is the block that runs.
  Job job = parse_job("kind: job\nname: big\nmodel: llama-2-70b\n"
                      "cluster: {instance_type: {base: local-cpu, gpus_per_node: 2}, nodes: 1}\n"
                      "training: {global_batch: 8, precision: fp32, optimizer: adam}\n"
                      "parallel: {tensor_parallel_degree: 2}\n",
                      "<test>");
  const ModelSpec& m = scaled_job(job, {}).model;
  CHECK(m.kv_heads == 2);
  CHECK(m.attention == AttentionKind::gqa);
  CHECK(m.mlp == MlpKind::swiglu);
  CHECK(m.norm == NormKind::rmsnorm);
  CHECK(m.positions == PositionKind::rope);
  CHECK_FALSE(m.bias);
  // Multi-head attention keeps a key/value head per head, multi-query one.
  ModelSpec mha = big;
  mha.attention = AttentionKind::mha;
  mha.kv_heads = mha.heads;
  CHECK(scaled_model(mha, {}).kv_heads == 4);
  ModelSpec mqa = big;
  mqa.attention = AttentionKind::mqa;
  mqa.kv_heads = 1;
  CHECK(scaled_model(mqa, {}, 2).kv_heads == 1);
  // The GPT block's description is unchanged.
  CHECK_THAT(describe_model(scaled_model(load_model("gpt2-small"), {})),
             Catch::Contains("seq 32, tied embeddings") && !Catch::Contains("swiglu"));
}

// ---- the whole model against LibTorch written out ----------------------------------

namespace {

using Params = std::map<std::string, torch::Tensor>;

// The LLaMA block written with torch:: functions from the model's named parameters:
// RMSNorm, per query head j its key/value head j / (heads / kv_heads), the rotation of
// each pair (i, i + d/2) by position x theta^(-2i/d), SwiGLU with fc1's rows [gate; up].
// With head_dim set apart the queries are heads x d wide (QKV's first heads d rows, proj's
// input); with QK-norm each query and key head is RMS-normalised over its d (the scales
// q_norm / k_norm) before its rotation.
torch::Tensor reference_loss(const ModelSpec& c, Params& p, const torch::Tensor& tokens,
                             const torch::Tensor& targets) {
  const std::int64_t b = tokens.size(0), s = tokens.size(1), H = c.heads, KV = c.kv_heads;
  const std::int64_t d = c.head_dim(), h = c.hidden, f = c.ffn_hidden, half = d / 2, qw = H * d;
  const auto rms = [&](const torch::Tensor& x, const std::string& name) {
    return x / torch::sqrt(x.pow(2).mean(-1, true) + 1e-5) * p.at(name + ".weight");
  };
  const torch::Tensor angle =
      (torch::arange(s, torch::kDouble).unsqueeze(1) * torch::pow(10000.0, -2.0 * torch::arange(half, torch::kDouble) / d))
          .to(torch::kFloat);
  const auto rotate = [&](const torch::Tensor& x) {  // [b, s, d] at positions 0 .. s-1
    const torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
    return torch::cat({x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()}, -1);
  };
  const torch::Tensor causal = torch::tril(torch::ones({s, s})).to(torch::kBool);
  torch::Tensor x = p.at("wte").index_select(0, tokens.reshape({-1})).view({b, s, h});
  for (int l = 0; l < c.layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    const torch::Tensor qkv = torch::matmul(rms(x, L + "ln1"), p.at(L + "attention.qkv.weight").t());
    std::vector<torch::Tensor> heads;
    for (std::int64_t j = 0; j < H; ++j) {
      const std::int64_t g = j / (H / KV);
      torch::Tensor q = qkv.narrow(-1, j * d, d), k = qkv.narrow(-1, qw + g * d, d);
      if (c.qk_norm) {
        q = rms(q, L + "attention.q_norm");
        k = rms(k, L + "attention.k_norm");
      }
      q = rotate(q);
      k = rotate(k);
      const torch::Tensor v = qkv.narrow(-1, qw + KV * d + g * d, d);
      torch::Tensor scores = torch::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(d));
      scores = torch::where(causal, scores, torch::full_like(scores, -INFINITY)).softmax(-1);
      heads.push_back(torch::matmul(scores, v));
    }
    x = x + torch::matmul(torch::cat(heads, -1), p.at(L + "attention.proj.weight").t());
    const torch::Tensor y = rms(x, L + "ln2");
    const torch::Tensor fc1 = p.at(L + "mlp.fc1.weight");
    const torch::Tensor gate = torch::matmul(y, fc1.narrow(0, 0, f).t()), up = torch::matmul(y, fc1.narrow(0, f, f).t());
    x = x + torch::matmul(gate * torch::sigmoid(gate) * up, p.at(L + "mlp.fc2.weight").t());
  }
  const torch::Tensor logits = torch::matmul(rms(x, "ln_f"), p.at("lm_head.weight").t());
  return torch::nn::functional::cross_entropy(logits.reshape({b * s, c.vocab}), targets.reshape({-1}));
}

}  // namespace

TEST_CASE("llama block: the whole model equals LibTorch written out in loss and gradients", "[backend][llama]") {
  at::Generator gen = at::detail::createCPUGenerator(8);
  for (int kv : {2, 1, 0})  // 0: Qwen3's, 2 key/value heads with head_dim 12 and QK-norm
    for (const char* core : {"standard", "selective", "flash"}) {
      ModelSpec c = llama_config(kv == 0 ? 2 : kv);
      if (kv == 0) {
        c.attention_head_dim = 12;
        c.qk_norm = true;
      }
      const bool flash = std::string(core) == "flash";
      const torch::Tensor t = torch::randint(0, c.vocab, {3, c.seq_len + 1}, gen, torch::kLong);
      const torch::Tensor tokens = t.slice(1, 0, c.seq_len), targets = t.slice(1, 1, c.seq_len + 1);
      GPTModel m(c, 4, ModelShard{}, flash);
      Params p;
      for (const auto& kv_pair : m->named_parameters())
        p[kv_pair.key()] = kv_pair.value().detach().clone().requires_grad_(true);
      CHECK(p.count("wpe") == 0);  // rotary positions: no table
      CHECK(p.count("layers.0.attention.qkv.bias") == 0);
      CHECK(p.count("layers.0.ln1.bias") == 0);
      SelectiveRecompute cores;
      torch::Tensor loss;
      {
        std::unique_ptr<SelectiveRecompute::Scope> scope;
        if (std::string(core) == "selective") scope = std::make_unique<SelectiveRecompute::Scope>(cores);
        loss = m->forward(tokens, targets);
      }
      CHECK(cores.size() == (std::string(core) == "selective" ? static_cast<std::size_t>(c.layers) : 0u));
      cores.recompute();
      loss.backward();
      const torch::Tensor expected = reference_loss(c, p, tokens, targets);
      expected.backward();
      INFO(core << " core, " << kv << " key/value heads: " << loss.item<double>() << " vs " << expected.item<double>());
      CHECK(loss.item<double>() == Approx(expected.item<double>()).epsilon(1e-5));
      for (const auto& kv_pair : m->named_parameters()) {
        const torch::Tensor& want = p.at(kv_pair.key()).grad();
        INFO(kv_pair.key() << ": largest difference " << max_difference(kv_pair.value().grad(), want));
        CHECK(max_difference(kv_pair.value().grad(), want) <= 1e-4 * want.abs().max().item<double>() + 1e-7);
      }
    }
}

// What autograd keeps per layer of the LLaMA block (tensor degree 1, fp32), measured with
// the CPU byte accounting, in elements, with b sequences of s tokens, hidden h, a query
// heads, ffn f:
//   the norms' inputs and the column-parallel GEMMs' inputs: 4sbh;
//   the rotated queries, and the keys and values expanded to the a query heads: 3sbh (the
//     layer plan counts them unexpanded, (h + 2 kv_heads d) sb);
//   the context (proj's input) sbh; SwiGLU's input [gate | up] 2sbf and its output (fc2's
//     input) sbf; the softmax output a s^2 b.
// Nothing else: the rotations keep nothing, RMSNorm its input alone, SwiGLU not silu(gate).
TEST_CASE("llama block: activation bytes per layer", "[backend][llama][memory]") {
  install_cpu_memory_accounting();
  ModelSpec c = llama_config(2);
  c.layers = 4;
  c.hidden = 64;
  c.ffn_hidden = 176;
  c.seq_len = 32;
  const std::int64_t b = 3, s = c.seq_len, h = c.hidden, a = c.heads, f = c.ffn_hidden;
  GPTModel m(c, 5);
  // The layers run from a leaf input held by the graph alone, as the executor's parts; the
  // bytes the graph holds are those released with it.
  torch::Tensor y = torch::randn({b, s, h}).requires_grad_(true);
  for (int l = 0; l < c.layers; ++l) y = m->layer(l, y);
  const torch::Tensor kept = y.detach();  // the output's storage outlives the graph: not counted
  const std::int64_t with_graph = cpu_tensor_bytes_in_use();
  y = torch::Tensor();
  const double per_layer = static_cast<double>(with_graph - cpu_tensor_bytes_in_use()) / c.layers;
  const double expected = 4.0 * static_cast<double>(8 * s * b * h + 3 * s * b * f + a * s * s * b);
  INFO("bytes per layer " << per_layer << ", expected " << expected);
  CHECK(per_layer == Approx(expected).epsilon(0.02));
}

// ---- multi-rank runs against one process ---------------------------------------------

namespace {

const std::string kJob = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-llama.yaml";
constexpr int kSteps = 5;

// Every parameter of rank `rank`'s shard of the last checkpoint in `dir`: name -> value.
Params saved_parameters(const std::string& dir, int rank) {
  const std::optional<int> step = latest_checkpoint_step(dir);
  REQUIRE(step.has_value());
  Params out;
  read_rank_shard(dir, *step, rank, [&](torch::serialize::InputArchive& archive) {
    for (const std::string& key : archive.keys())
      if (key.rfind("param.", 0) == 0) archive.read(key, out[key.substr(6)]);
  });
  return out;
}

// The rows [begin, begin + n) of `w` along `dim`.
torch::Tensor span(const torch::Tensor& w, int dim, std::int64_t begin, std::int64_t n) {
  return w.index_select(dim, torch::arange(begin, begin + n, torch::kLong));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The part of the whole model's `name` that tensor rank r of t holds (tiny-llama.yaml:
// hidden 64, 4 heads over 2 key/value heads of 16, ffn 176), written out from Megatron's
// split: QKV's rows of the rank's query heads, key heads and value heads; fc1's rows of
// its gate slice and its up slice; the row-parallel layers' input columns; the vocabulary
// rows of the embedding and the LM head; the norms whole.
torch::Tensor expected_part(const std::string& name, const torch::Tensor& w, int t, int r) {
  const std::int64_t h = 64, d = 16, q_heads = 4 / t, kv_heads = 2 / t, f = 176, kv = 2 * d;
  if (ends_with(name, "qkv.weight"))
    return torch::cat({span(w, 0, r * q_heads * d, q_heads * d), span(w, 0, h + r * kv_heads * d, kv_heads * d),
                       span(w, 0, h + kv + r * kv_heads * d, kv_heads * d)});
  if (ends_with(name, "fc1.weight")) return torch::cat({span(w, 0, r * f / t, f / t), span(w, 0, f + r * f / t, f / t)});
  if (ends_with(name, "proj.weight") || ends_with(name, "fc2.weight")) return span(w, 1, r * w.size(1) / t, w.size(1) / t);
  if (name == "wte" || name == "lm_head.weight") return span(w, 0, r * w.size(0) / t, w.size(0) / t);
  return w;
}

// A scratch directory for one run's checkpoint, removed with it.
struct ScratchDir {
  std::string path;
  explicit ScratchDir(const std::string& what)
      : path((std::filesystem::temp_directory_path() /
              ("partune-llama-" + what + "-" + std::to_string(::getpid()))).string()) {
    std::filesystem::remove_all(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

// The one-process run of tiny-llama.yaml, saved after its last step (once per process).
struct Reference {
  std::vector<double> losses;
  Params parameters;
};
const Reference& reference() {
  static const Reference ref = [] {
    ScratchDir dir("reference");
    Reference r;
    r.losses = partune::test::run_job(kJob, partune::test::kOneProcess + "--save " + dir.path, kSteps).losses;
    r.parameters = saved_parameters(dir.path, 0);
    return r;
  }();
  return ref;
}

// The layout `args` over `world` ranks, its tensor degree `t` (rank r is tensor rank r % t:
// tensor parallelism is the only split beside data or pipeline here): every step's loss
// and every parameter each rank holds after the last step against the one-process run.
void check_layout(const std::string& args, int world, int t) {
  const Reference& ref = reference();
  ScratchDir dir("layout");
  const partune::test::Run run = partune::test::run_job(kJob, args + " --save " + dir.path, kSteps);
  INFO("partune run " << args);
  CHECK(run.doc.at("world_size").get<int>() == world);
  REQUIRE(run.losses.size() == ref.losses.size());
  for (int i = 0; i < kSteps; ++i) {
    INFO("step " << i + 1 << ": " << run.losses[i] << " vs single process " << ref.losses[i]);
    CHECK(std::abs(run.losses[i] - ref.losses[i]) <= 1e-4 * std::abs(ref.losses[i]));
  }
  CHECK(run.losses.back() < run.losses.front() - 0.05);  // training moved
  std::map<std::string, int> holders;                      // every parameter is held somewhere
  for (int rank = 0; rank < world; ++rank)
    for (const auto& [name, value] : saved_parameters(dir.path, rank)) {
      INFO("rank " << rank << ": " << name);
      REQUIRE(ref.parameters.count(name) == 1);
      const torch::Tensor expected = expected_part(name, ref.parameters.at(name), t, rank % t);
      REQUIRE(value.sizes() == expected.sizes());
      INFO("largest difference " << max_difference(value, expected));
      CHECK(max_difference(value, expected) <= 1e-4);
      ++holders[name];
    }
  CHECK(holders.size() == ref.parameters.size());
}

}  // namespace

TEST_CASE("llama block multi-rank: tensor parallel 2", "[backend][multirank][llama]") {
  check_layout("--set tensor_parallel_degree=2", 2, 2);
}

TEST_CASE("llama block multi-rank: tensor parallel 2 with sequence parallelism", "[backend][multirank][llama]") {
  check_layout("--set tensor_parallel_degree=2 --set sequence_parallel=true", 2, 2);
}

TEST_CASE("llama block multi-rank: pipeline 2 (1F1B)", "[backend][multirank][llama]") {
  check_layout("--set pipeline_parallel_degree=2 --set pipeline=interleaved", 2, 1);
}

TEST_CASE("llama block multi-rank: data parallel 2", "[backend][multirank][llama]") { check_layout("", 2, 1); }

// Sharded ranks save their optimizer slices, not named parameters: the losses.
TEST_CASE("llama block multi-rank: sharded data parallel 2", "[backend][multirank][llama]") {
  partune::test::check_equivalent(kJob, "--set sharded_data_parallel_degree=2", 2, "", kSteps);
}

// The attention core's other paths, and a tied head, over tensor 2.
TEST_CASE("llama block multi-rank: selective recomputation and FlashAttention over tensor 2",
          "[backend][multirank][llama]") {
  check_layout("--set tensor_parallel_degree=2 --set activation_checkpointing=selective", 2, 2);
  check_layout("--set tensor_parallel_degree=2 --set flash_attention=true", 2, 2);
  partune::test::check_equivalent(kJob, "--set tensor_parallel_degree=2 --set sequence_parallel=true", 2,
                                  "--set model.tied_embeddings=true", kSteps);
}

// Qwen3's attention: heads of 24 over hidden 64 (queries 96 wide) and QK-norm, whose
// scales each tensor rank holds whole and sums the gradients of over the group.
TEST_CASE("qwen3 block multi-rank: head_dim and QK-norm over tensor 2", "[backend][multirank][llama]") {
  const std::string qwen3 = "--set model.head_dim=24 --set model.qk_norm=true";
  partune::test::check_equivalent(kJob, "--set tensor_parallel_degree=2", 2, qwen3, kSteps);
  partune::test::check_equivalent(kJob, "--set tensor_parallel_degree=2 --set sequence_parallel=true", 2, qwen3,
                                  kSteps);
}

// DeepSeek's multi-head latent attention (tiny-mla.yaml): its down projections and latent
// norms whole on each tensor rank (gradients summed over the group), up projections and
// the output projection split by heads; FlashAttention with the values padded; with
// sequence parallelism the latents gathered from the shards.
TEST_CASE("mla block multi-rank: latent attention over tensor 2 (and sequence parallelism), pipeline 2 and data 2", "[backend][multirank][llama]") {
  const std::string mla = std::string(PARTUNE_SOURCE_DIR) + "/tests/backend/data/tiny-mla.yaml";
  partune::test::check_equivalent(mla, "--set tensor_parallel_degree=2", 2, "", kSteps);
  partune::test::check_equivalent(mla, "--set tensor_parallel_degree=2 --set flash_attention=true", 2,
                                  "--set flash_attention=true", kSteps);
  partune::test::check_equivalent(mla, "--set tensor_parallel_degree=2 --set sequence_parallel=true", 2, "", kSteps);
  partune::test::check_equivalent(mla, "--set pipeline_parallel_degree=2", 2, "", kSteps);
  partune::test::check_equivalent(mla, "", 2, "", kSteps);
}

TEST_CASE("llama block: multi-query attention is refused over 2 tensor ranks and runs without", "[backend][llama]") {
  const std::string mqa = "--set model.attention=mqa --set model.kv_heads=1";
  // Refused before any rank starts, naming the key/value heads.
  const partune::test::Outcome refused = partune::test::run_command(kJob, mqa + " --steps 1 --set tensor_parallel_degree=2");
  INFO(refused.out << refused.err);
  CHECK(WIFEXITED(refused.status));
  CHECK(WEXITSTATUS(refused.status) != 0);
  CHECK_THAT(refused.err, Catch::Contains("tensor_parallel_degree 2 does not divide the model's kv_heads (1)"));
  // The same in-process: the run's reason.
  Job job = parse_job("kind: job\nname: mqa\nmodel: {name: mqa, layers: 2, hidden: 32, heads: 4, attention: mqa, "
                      "vocab: 64, seq_len: 16, mlp: swiglu, norm: rmsnorm, positions: rope, bias: false}\n"
                      "cluster: {instance_type: {base: local-cpu, gpus_per_node: 2}, nodes: 1}\n"
                      "training: {global_batch: 8, precision: fp32, optimizer: adam}\n"
                      "parallel: {tensor_parallel_degree: 2}\n",
                      "<test>");
  RunOptions two;
  two.environment = RankEnvironment{};
  two.environment->world_size = 2;
  CHECK_THAT(why_not_runnable(job, two), Catch::Contains("kv_heads (1)") && Catch::Contains("does not replicate"));
  // Without tensor parallelism: data parallel 2 against one process.
  partune::test::check_equivalent(kJob, "", 2, mqa, kSteps);
}
