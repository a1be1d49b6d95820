// Issue 27 item 5: a Hugging Face model is named after its files, and a configuration that
// does not fit says what to change (fit_hint.hpp).
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "job_fixtures.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/fit_hint.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/units.hpp"
#include "scratch_dir.hpp"

using namespace partune;
using partune::testing::ScratchDir;
using partune::testing::p4d_job;
using partune::testing::require_valid;
using Catch::Contains;
using Catch::StartsWith;
namespace fs = std::filesystem;

namespace {

// LLaMA-3 8B's published config.json (no _name_or_path), `extra` lines added at its top.
std::string llama3_config(const std::string& extra = "") {
  return "{\n" + extra +
         "  \"architectures\": [\"LlamaForCausalLM\"], \"hidden_act\": \"silu\", \"hidden_size\": 4096,\n"
         "  \"intermediate_size\": 14336, \"max_position_embeddings\": 8192, \"model_type\": \"llama\",\n"
         "  \"num_attention_heads\": 32, \"num_hidden_layers\": 32, \"num_key_value_heads\": 8,\n"
         "  \"rope_theta\": 500000.0, \"tie_word_embeddings\": false, \"vocab_size\": 128256\n}\n";
}

// The model of a job whose model mapping is `from_hf: file` plus `extra`.
ModelSpec hf_model(const fs::path& file, const std::string& text, const std::string& extra = "") {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
  return parse_job("kind: job\nname: t\nmodel:\n  from_hf: " + file.string() + "\n" + extra +
                       "cluster: {instance_type: p4d.24xlarge, nodes: 1}\ntraining: {global_batch: 8, precision: bf16}\n",
                   "t.yaml")
      .model;
}

// The job: LLaMA-3 8B on one p4d node, 128 sequences, every parallel knob at its
// default (data parallel 8: 16 sequences of 8192 tokens a micro-batch, no FlashAttention).
Job llama3_job() {
  Job j = p4d_job("llama-3-8b", 1, 128);
  j.training.precision = Precision::bf16;
  require_valid(j);
  return j;
}

}  // namespace

TEST_CASE("from_hf names the model after its files when config.json has no _name_or_path", "[model][hf]") {
  ScratchDir dir("partune-fit-hint");
  // The folder holding config.json.
  CHECK(hf_model(dir.path / "llama-3-8b" / "config.json", llama3_config()).name == "llama-3-8b");
  // A file not called config.json: its stem.
  CHECK(hf_model(dir.path / "my-8b.json", llama3_config()).name == "my-8b");
  // The Hugging Face cache: models--ORG--NAME/snapshots/<commit>/config.json.
  const fs::path cached = dir.path / "models--meta-llama--Meta-Llama-3-8B" / "snapshots" /
                          "62bd457b6fe961a42a631306577e622c83876cb6" / "config.json";
  CHECK(hf_model(cached, llama3_config()).name == "meta-llama/Meta-Llama-3-8B");
  // _name_or_path: a Hub id as written, a local path's last folder.
  const fs::path named = dir.path / "x" / "config.json";
  CHECK(hf_model(named, llama3_config("  \"_name_or_path\": \"meta-llama/Meta-Llama-3-8B\",\n")).name ==
        "meta-llama/Meta-Llama-3-8B");
  CHECK(hf_model(named, llama3_config("  \"_name_or_path\": \"/home/me/checkpoints/l3-ft/\",\n")).name == "l3-ft");
  // name: beside from_hf wins over all of them.
  CHECK(hf_model(dir.path / "llama-3-8b" / "config.json", llama3_config(), "  name: mine\n").name == "mine");
}

TEST_CASE("LLaMA-3 8B with the defaults: 2810 GiB, most of it the s x s attention scores", "[memory][fit_hint]") {
  const Job j = llama3_job();
  const Estimate e = estimate(j);
  REQUIRE_FALSE(e.fits);
  // Standard attention keeps the softmax output, 2 bytes x 32 heads x 8192^2 = 4 GiB a
  // layer and sequence (no dropout, no mask): 16 sequences x 32 layers = 2048 GiB.
  const double scores = 16.0 * 32 * 2 * 32 * 8192.0 * 8192.0;
  CHECK(attention_score_share(j) * e.memory.activations == Approx(scores).epsilon(1e-9));
  // The logits: 16 x 8192 tokens x 128256 x (2 + 4 bytes of the fp32 loss copy).
  CHECK(e.memory.logits == Approx(16.0 * 8192 * 128256 * 6));
  // Model states: 8,030,261,248 parameters x (2 + 2 + 12) bytes.
  CHECK(e.memory.parameters + e.memory.gradients + e.memory.optimizer_states == Approx(8030261248.0 * 16));
  CHECK(e.memory.total() / units::GiB == Approx(2810.4).margin(0.05));
  // FlashAttention removes exactly that share of the activations.
  Job flash = j;
  flash.parallel.flash_attention = true;
  CHECK(estimate(flash).memory.activations == Approx((1 - attention_score_share(j)) * e.memory.activations));
  CHECK(attention_score_share(flash) == 0);

  const std::string& r = e.not_fit_reason;
  CHECK(r.rfind("stage 0 needs 2810.4 GiB of 40.0 GiB HBM; largest parts: activations 2592.0 GiB, logits 93.9 GiB; "
                "to fit, shrink the activations (2592.0 GiB) with flash_attention: true (the 8192x8192 attention "
                "scores are 79% of a layer's activations), activation_checkpointing: full (or selective), or fewer "
                "sequences per micro-batch (16 now: raise gradient_accumulation or microbatches)",
                0) == 0);
  CHECK(r.find('\n') == std::string::npos);
  CHECK_THAT(r, !Contains("model states"));  // 120 GiB, under a quarter of the total
}

TEST_CASE("every knob the hint names shrinks the job it is named for", "[memory][fit_hint]") {
  const Job j = llama3_job();
  const double before = estimate(j).memory.total();
  Job flash = j, full = j, accum = j;
  flash.parallel.flash_attention = true;
  full.parallel.activation_checkpointing = Checkpointing::full;
  accum.training.gradient_accumulation = 16;
  for (const Job* k : {&flash, &full, &accum}) {
    require_valid(*k);
    CHECK(estimate(*k).memory.total() < before);
  }
  // With all three the model states lead and the logits follow (each over a quarter).
  Job all = flash;
  all.parallel.activation_checkpointing = Checkpointing::full;
  const Estimate e = estimate(all);
  CHECK_THAT(e.not_fit_reason, Contains("to fit, shrink the model states (119.7 GiB) with shard_optimizer_state: true "
                                        "(over the 8 data-parallel ranks), sharded_data_parallel_degree up to 8, a "
                                        "higher tensor_parallel_degree or pipeline_parallel_degree, or "
                                        "offload_optimizer: true; the logits (93.9 GiB) with fewer sequences per "
                                        "micro-batch (16 now: raise gradient_accumulation or microbatches) or "
                                        "loss_precision: training (2 bytes a logit instead of 6)"));
  CHECK_THAT(e.not_fit_reason, !Contains("the activations"));
  for (auto knob : {+[](Job& k) { k.parallel.shard_optimizer_state = true; },
                    +[](Job& k) { k.parallel.sharded_data_parallel_degree = 8; },
                    +[](Job& k) { k.parallel.offload_optimizer = true; },
                    +[](Job& k) { k.training.loss_precision = LossPrecision::training; }}) {
    Job k = all;
    knob(k);
    require_valid(k);
    CHECK(estimate(k).memory.total() < e.memory.total());
  }
}

TEST_CASE("the hint names only knobs the job has not turned", "[fit_hint]") {
  MemoryBreakdown states;  // model states lead
  states.parameters = 30 * units::GiB;
  states.gradients = 30 * units::GiB;
  states.optimizer_states = 60 * units::GiB;
  states.activations = 5 * units::GiB;
  Job j = llama3_job();
  SECTION("ZeRO-1 already on: sharding the rest is what is left") {
    j.parallel.shard_optimizer_state = true;
    const std::string h = fit_hint(j, states);
    CHECK(h.rfind("to fit, shrink the model states (120.0 GiB) with shard_gradients: true (each rank keeps 1/8 of "
                  "the gradients), sharded_data_parallel_degree up to 8", 0) == 0);
    CHECK_THAT(h, !Contains("shard_optimizer_state"));
    CHECK_THAT(h, !Contains("activations"));
    j.parallel.shard_gradients = true;  // ZeRO-2 too
    CHECK(fit_hint(j, states).rfind("to fit, shrink the model states (120.0 GiB) with sharded_data_parallel_degree "
                                    "up to 8", 0) == 0);
  }
  SECTION("tensor 8 over the node: no data parallelism to shard over, no tensor room") {
    j.parallel.tensor_parallel_degree = 8;
    CHECK(fit_hint(j, states) == "to fit, shrink the model states (120.0 GiB) with a higher pipeline_parallel_degree "
                                 "or offload_optimizer: true");
  }
  MemoryBreakdown acts;  // activations lead
  acts.activations = 100 * units::GiB;
  acts.parameters = 10 * units::GiB;
  SECTION("everything turned already: more stages") {
    j.training.gradient_accumulation = 16;  // one sequence a micro-batch
    j.parallel.flash_attention = true;
    j.parallel.activation_checkpointing = Checkpointing::full;
    j.parallel.offload_activations = true;
    require_valid(j);
    CHECK(fit_hint(j, acts) == "to fit, shrink the activations (100.0 GiB) with a higher pipeline_parallel_degree "
                                "(fewer layers a stage)");
  }
  SECTION("selective checkpointing over tensor parallelism: full, and sequence parallelism") {
    j.parallel.tensor_parallel_degree = 2;
    j.parallel.activation_checkpointing = Checkpointing::selective;
    const std::string h = fit_hint(j, acts);
    CHECK_THAT(h, Contains("activation_checkpointing: full, offload_activations: true"));
    CHECK_THAT(h, Contains("sequence_parallel: true"));
    // Selective checkpointing keeps no scores; they live in the one-layer working set only.
    CHECK_THAT(h, !Contains("flash_attention"));
  }
  SECTION("fp32 on an A100: FlashAttention is not on offer") {
    j.training.precision = Precision::fp32;
    CHECK_THAT(fit_hint(j, acts), !Contains("flash_attention"));
    CHECK_THAT(fit_hint(j, acts), StartsWith("to fit, shrink the activations (100.0 GiB) with activation_checkpointing"));
  }
  MemoryBreakdown logits;  // logits lead
  logits.logits = logits.logits_one_microbatch = 50 * units::GiB;
  logits.parameters = 5 * units::GiB;
  SECTION("logits: the 6-byte loss, and a smaller micro-batch") {
    CHECK(fit_hint(j, logits) == "to fit, shrink the logits (50.0 GiB) with fewer sequences per micro-batch (16 now: "
                                  "raise gradient_accumulation or microbatches) or loss_precision: training (2 bytes a "
                                  "logit instead of 6)");
  }
}

TEST_CASE("GPT-3 175B over one node's tensor group: the model states, with no one to shard over", "[fit_hint]") {
  Job j = p4d_job("gpt3-175b", 1, 1);
  j.parallel.tensor_parallel_degree = 8;
  require_valid(j);
  const Estimate e = estimate(j);
  REQUIRE_FALSE(e.fits);
  CHECK_THAT(e.not_fit_reason, Contains("; to fit, shrink the model states ("));
  CHECK_THAT(e.not_fit_reason, Contains("with a higher pipeline_parallel_degree or offload_optimizer: true"));
  CHECK_THAT(e.not_fit_reason, !Contains("shard"));
}

TEST_CASE("a long sequence that does not fit: the hint names context parallelism, and it shrinks the job",
          "[fit_hint][context]") {
  // LLaMA-3 70B at 128k tokens on 32 p5 nodes, tensor 8 x pipeline 4 x data 8, selective
  // checkpointing: one sequence's activations on a stage outgrow the H100. Split in two,
  // the same micro-batches in flight keep half the tokens each.
  Job j = load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/llama-3-70b-128k-p5.yaml");
  j.parallel.context_parallel_degree = 1;
  j.training.global_batch = 32;
  j.parallel.microbatches = 4;  // 32 sequences over data 8: one a micro-batch, 4 in flight
  j.parallel.activation_checkpointing = Checkpointing::selective;
  require_valid(j);
  const Estimate e = estimate(j);
  REQUIRE_FALSE(e.fits);
  CHECK_THAT(e.not_fit_reason,
             Contains("context_parallel_degree: 2 (each rank keeps 65536 of the 131072 tokens; 1 now)"));
  Job split = j;
  split.parallel.context_parallel_degree = 2;
  split.parallel.microbatches = 8;  // data 4 now: still one sequence a micro-batch, 4 in flight
  require_valid(split);
  CHECK(estimate(split).memory.total() < e.memory.total());
}
