// The LibTorch backend (backend/): training runs, determinism, a hand-written LibTorch
// reference, gradient accumulation, and the rejection of instructions it cannot run.
//
// LibTorch first: c10 (c10/util/logging_is_not_google_glog.h) defines a CHECK macro of
// its own, which would silently replace Catch's (a CHECK that Catch never counts). It is
// undefined here, and catch.hpp is included last so that CHECK is Catch's.
#include <cmath>
#include <iomanip>
#include <string>

#include <torch/torch.h>

#include "partune/backend/executor.hpp"
#include "partune/backend/gpt_model.hpp"
#include "partune/costmodel/scaled_job.hpp"
#include "partune/backend/token_source.hpp"
#include "partune/backend/trainer.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/program_builder.hpp"

#undef CHECK
#include <catch2/catch.hpp>

using namespace partune;
using namespace partune::backend;

namespace {

// A tiny single-rank job (the local-cpu instance cut to one rank).
Job tiny_job(int microbatches = 4, const std::string& optimizer = "adam", const std::string& checkpointing = "none",
             int global_batch = 8, int gpus = 1, bool tied = true) {
  const std::string yaml = "kind: job\nname: tiny\n"
                           "model: {name: tiny, layers: 2, hidden: 32, heads: 4, vocab: 64, seq_len: 16, tied_embeddings: " +
                           std::string(tied ? "true" : "false") + "}\n"
                           "cluster: {instance_type: {base: local-cpu, gpus_per_node: " + std::to_string(gpus) +
                           "}, nodes: 1}\n"
                           "training: {global_batch: " + std::to_string(global_batch) +
                           ", precision: fp32, optimizer: " + optimizer +
                           "}\n"
                           "parallel: {microbatches: " + std::to_string(microbatches) +
                           ", activation_checkpointing: " + checkpointing + "}\n";
  return parse_job(yaml, "<test>");
}

std::vector<double> losses(const Job& job, int steps, RunOptions options = {}) {
  Trainer t(job, options);
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) out.push_back(t.step().loss);
  return out;
}

bool relative_close(double a, double b, double tol) { return std::abs(a - b) <= tol * std::abs(b); }

}  // namespace

TEST_CASE("backend: the loss decreases over 20 steps on a tiny model", "[backend]") {
  RunOptions o;
  o.learning_rate = 3e-3;
  const std::vector<double> l = losses(tiny_job(), 20, o);
  INFO("first " << l.front() << ", last " << l.back());
  CHECK(l.front() == Approx(std::log(64.0)).epsilon(0.05));  // starts near ln(vocab)
  CHECK(l.back() < l.front() - 0.5);
  double first5 = 0, last5 = 0;
  for (int i = 0; i < 5; ++i) first5 += l[i], last5 += l[15 + i];
  CHECK(last5 < first5);
}

TEST_CASE("backend: two runs with the same seed give bitwise identical losses", "[backend]") {
  for (const char* ckpt : {"none", "full"}) {
    const std::vector<double> a = losses(tiny_job(4, "adam", ckpt), 5);
    const std::vector<double> b = losses(tiny_job(4, "adam", ckpt), 5);
    CHECK(a == b);
  }
  RunOptions other;
  other.seed = 99;
  CHECK(losses(tiny_job(), 2, other) != losses(tiny_job(), 2));
}

TEST_CASE("backend: checkpointing (forward without autograd + recompute) changes nothing", "[backend]") {
  CHECK(losses(tiny_job(4, "adam", "full"), 3) == losses(tiny_job(4, "adam", "none"), 3));
}

// Plain LibTorch: the same model written out with torch:: functions, no backend module.
TEST_CASE("backend: one Adam step equals a hand-written LibTorch reference", "[backend]") {
  const Job job = tiny_job(/*microbatches=*/1);
  RunOptions o;
  Trainer trainer(job, o);
  const ModelSpec c = trainer.job().model;
  const double first = trainer.step().loss;
  const double second = trainer.step().loss;

  // Same initial parameters: the model built from the same seed, copied into plain tensors.
  GPTModel init(c, o.seed);
  std::map<std::string, torch::Tensor> p;
  std::vector<torch::Tensor> params;
  for (auto& kv : init->named_parameters()) {
    p[kv.key()] = kv.value().detach().clone().requires_grad_(true);
    params.push_back(p[kv.key()]);
  }
  auto ln = [&](const torch::Tensor& x, const std::string& name) {
    return torch::layer_norm(x, {c.hidden}, p.at(name + ".weight"), p.at(name + ".bias"), 1e-5);
  };
  auto forward_loss = [&](const torch::Tensor& tokens, const torch::Tensor& targets) {
    const std::int64_t b = tokens.size(0), s = tokens.size(1), H = c.heads, d = c.hidden / c.heads;
    torch::Tensor x = p.at("wte").index_select(0, tokens.reshape({-1})).view({b, s, c.hidden}) +
                      p.at("wpe").narrow(0, 0, s);
    const torch::Tensor causal = torch::tril(torch::ones({s, s})).to(torch::kBool);
    for (int l = 0; l < c.layers; ++l) {
      const std::string L = "layers." + std::to_string(l) + ".";
      const torch::Tensor h = ln(x, L + "ln1");
      const torch::Tensor qkv = torch::addmm(p.at(L + "attention.qkv.bias"), h.reshape({b * s, c.hidden}),
                                             p.at(L + "attention.qkv.weight").t());
      const auto parts = qkv.view({b, s, 3 * c.hidden}).chunk(3, -1);
      const torch::Tensor q = parts[0].reshape({b, s, H, d}).transpose(1, 2);
      const torch::Tensor k = parts[1].reshape({b, s, H, d}).transpose(1, 2);
      const torch::Tensor v = parts[2].reshape({b, s, H, d}).transpose(1, 2);
      torch::Tensor att = torch::matmul(q, k.transpose(2, 3)) / std::sqrt(static_cast<double>(d));
      att = torch::where(causal, att, torch::full_like(att, -INFINITY)).softmax(-1);
      const torch::Tensor ctx = torch::matmul(att, v).transpose(1, 2).reshape({b, s, c.hidden});
      x = x + torch::matmul(ctx, p.at(L + "attention.proj.weight").t()) + p.at(L + "attention.proj.bias");
      const torch::Tensor h2 = ln(x, L + "ln2");
      const torch::Tensor f = torch::gelu(torch::matmul(h2, p.at(L + "mlp.fc1.weight").t()) + p.at(L + "mlp.fc1.bias"));
      x = x + torch::matmul(f, p.at(L + "mlp.fc2.weight").t()) + p.at(L + "mlp.fc2.bias");
    }
    const torch::Tensor logits = torch::matmul(ln(x, "ln_f"), p.at("wte").t());  // tied head
    return -torch::log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).mean();
  };
  // Same data: the token source of the same seed, step 0 and step 1, all 8 sequences.
  const TokenSource tokens(o.seed, c.vocab);
  auto batch = [&](int step) {
    std::vector<std::int64_t> flat = tokens.batch(step, 8, c.seq_len);
    const torch::Tensor t = torch::from_blob(flat.data(), {8, c.seq_len + 1}, torch::kLong).clone();
    return std::make_pair(t.slice(1, 0, c.seq_len), t.slice(1, 1, c.seq_len + 1));
  };
  torch::optim::Adam adam(params, torch::optim::AdamOptions(1e-3));
  const auto [x0, y0] = batch(0);
  torch::Tensor loss0 = forward_loss(x0, y0);
  adam.zero_grad();
  loss0.backward();
  adam.step();
  const auto [x1, y1] = batch(1);
  const double loss1 = forward_loss(x1, y1).item<double>();

  INFO(std::setprecision(17) << "backend " << first << " " << second << ", reference " << loss0.item<double>() << " "
                              << loss1);
  CHECK(relative_close(first, loss0.item<double>(), 1e-6));
  CHECK(relative_close(second, loss1, 1e-6));
  CHECK(second != first);  // the step did change the parameters
}

TEST_CASE("backend: 4 micro-batches of 2 accumulate the gradient of 1 micro-batch of 8", "[backend]") {
  for (const char* opt : {"adam", "sgd"}) {
    const std::vector<double> four = losses(tiny_job(4, opt), 3);
    const std::vector<double> one = losses(tiny_job(1, opt), 3);
    INFO(std::setprecision(17) << opt << ": " << four[1] << " vs " << one[1]);
    CHECK(relative_close(four[0], one[0], 1e-5));
    CHECK(relative_close(four[1], one[1], 1e-5));  // the loss after one step: same gradients
    CHECK(relative_close(four[2], one[2], 1e-5));
  }
}

TEST_CASE("backend: programs the executor cannot run are rejected by name", "[backend]") {
  const Job job = tiny_job();
  RankProgram program;
  Instruction f;
  f.kind = OpKind::forward;
  f.microbatch = 0;
  f.chunk = 3;  // virtual_stages is 1
  program.ops = {f};
  REQUIRE_THROWS_AS(check_executable(job, program), UnsupportedInstruction);
  REQUIRE_THROWS_WITH(check_executable(job, program), Catch::Contains("instruction 0 (forward, micro-batch 0, chunk 3)") &&
                                                          Catch::Contains("does not exist"));
  Instruction b;
  b.kind = OpKind::backward;
  program.ops = {b};
  REQUIRE_THROWS_WITH(check_executable(job, program), Catch::Contains("without a micro-batch"));

  // Through the trainer, before anything runs: sharded data parallelism with the head on
  // stage 0 (the head's gathered embedding would belong to two buckets).
  Job head_first = tiny_job(4, "adam", "none", 16, /*gpus=*/4);
  head_first.parallel.pipeline_parallel_degree = 2;
  head_first.parallel.sharded_data_parallel_degree = 2;
  head_first.parallel.lm_head_stage = LmHeadStage::first;
  RunOptions four;
  four.environment = RankEnvironment{};
  four.environment->world_size = 4;
  const std::string why = why_not_runnable(head_first, four);
  CHECK_THAT(why, Catch::Contains("rank 0: instruction") && Catch::Contains("lm_head_stage: first"));
}

TEST_CASE("backend: a world larger than the process is refused with what to do", "[backend]") {
  const Job two = tiny_job(4, "adam", "none", 8, /*gpus=*/2);
  CHECK_THAT(why_not_runnable(two, RunOptions{}), Catch::Contains("--nproc 2"));
  REQUIRE_THROWS_WITH(Trainer(two, RunOptions{}), Catch::Contains("world size 2"));
  RunOptions four;
  four.environment = RankEnvironment{};
  four.environment->world_size = 4;
  CHECK_THAT(why_not_runnable(two, four), Catch::Contains("WORLD_SIZE is 4"));
  Job tp3 = two;
  tp3.parallel.tensor_parallel_degree = 2;
  RunOptions scale;
  scale.environment = RankEnvironment{};
  scale.environment->world_size = 2;
  scale.scale.heads = 1;
  CHECK_THAT(why_not_runnable(tp3, scale), Catch::Contains("tensor_parallel_degree: 2 does not divide the model's 1 attention heads"));
}

TEST_CASE("backend: multi-token prediction is refused by name before anything runs", "[backend][mtp]") {
  Job mtp = tiny_job(4, "adam", "none", 8, /*gpus=*/1);
  mtp.model.mtp_layers = 1;
  CHECK_THAT(why_not_runnable(mtp, RunOptions{}), Catch::Contains("multi-token prediction (model.mtp_layers)"));
  REQUIRE_THROWS_WITH(Trainer(mtp, RunOptions{}), Catch::Contains("mtp_layers"));
}

TEST_CASE("backend: bf16 moments are refused by name (its Adam keeps fp32 ones)", "[backend]") {
  Job half = tiny_job(4, "adam", "none", 8, /*gpus=*/1);
  half.training.precision = Precision::bf16;
  half.training.moment_precision = Precision::bf16;
  CHECK_THAT(why_not_runnable(half, RunOptions{}), Catch::Contains("moment_precision"));
}

TEST_CASE("backend: the model-size scaling rule", "[backend]") {
  const ModelSpec gpt2 = load_model("gpt2-small");
  const ModelSpec d = scaled_model(gpt2, {});
  CHECK(d.layers == 2);
  CHECK(d.hidden == 64);
  CHECK(d.heads == 4);
  CHECK(d.seq_len == 32);
  CHECK(d.vocab == 256);
  CHECK(d.ffn_hidden == 256);
  CHECK(d.tied_embeddings);
  ScaleOptions s;
  s.layers = 3;
  s.hidden = 96;
  const ModelSpec e = scaled_model(gpt2, s);
  CHECK(e.layers == 3);
  CHECK(e.hidden == 96);
  CHECK(e.heads == 4);
  CHECK(e.ffn_hidden == 384);
  // A small model runs as it is.
  const ModelSpec k = scaled_model(tiny_job().model, {});
  CHECK(k.layers == 2);
  CHECK(k.hidden == 32);
  CHECK(k.vocab == 64);
  CHECK(k.seq_len == 16);
  // The parameter count matches the module the backend builds.
  GPTModel m(k, 1);
  long long n = 0;
  for (const auto& t : m->parameters()) n += t.numel();
  CHECK(n == std::llround(total_parameters(k)));
  s = {};
  s.heads = 5;
  CHECK_THROWS_WITH(scaled_model(gpt2, s), Catch::Contains("heads"));
}

TEST_CASE("backend: an untied LM head trains and has its own weight", "[backend]") {
  const Job job = tiny_job(4, "adam", "none", 8, 1, /*tied=*/false);
  const ModelSpec c = scaled_model(job.model, {});
  REQUIRE_FALSE(c.tied_embeddings);
  GPTModel m(c, 1);
  REQUIRE(m->lm_head);
  long long n = 0;
  for (const auto& t : m->parameters()) n += t.numel();
  CHECK(n == std::llround(total_parameters(c)));
  RunOptions o;
  o.learning_rate = 3e-3;
  const std::vector<double> l = losses(job, 10, o);
  CHECK(l.back() < l.front() - 0.2);
}

// The executor is not tied to layer granularity: the chunk program (one forward and one
// backward per micro-batch, layer = -1) gives the same steps.
TEST_CASE("backend: chunk and layer granularity execute the same step", "[backend]") {
  for (const char* ckpt : {"none", "full"}) {
    const Job base = tiny_job(2, "adam", ckpt);
    const Job job = scaled_job(base, {});
    const ModelSpec& c = job.model;
    const TokenSource tokens(5, c.vocab);
    std::vector<double> result[2];
    for (int g = 0; g < 2; ++g) {
      ProgramOptions po;
      po.granularity = g == 0 ? Granularity::layer : Granularity::chunk;
      const RankProgram program = build_program(job, 0, po);
      GPTModel model(c, 5);
      ProgramExecutor ex(job, program, model, OptimizerSettings{Optimizer::adam, 1e-3});
      for (int step = 0; step < 3; ++step) {
        std::vector<std::int64_t> flat = tokens.batch(step, 8, c.seq_len);
        const torch::Tensor t = torch::from_blob(flat.data(), {8, c.seq_len + 1}, torch::kLong).clone();
        std::vector<MicroBatchData> data;
        for (int i = 0; i < 2; ++i) {
          const torch::Tensor rows = t.slice(0, 4 * i, 4 * i + 4);
          data.push_back({rows.slice(1, 0, c.seq_len).contiguous(), rows.slice(1, 1, c.seq_len + 1).contiguous()});
        }
        std::vector<partune::TraceEvent> events;
        result[g].push_back(ex.run(data, &events).loss);
        CHECK(events.size() == program.ops.size());
      }
    }
    INFO(ckpt);
    for (int i = 0; i < 3; ++i) CHECK(relative_close(result[1][i], result[0][i], 1e-6));
  }
}
