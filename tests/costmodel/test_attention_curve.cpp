// Issue 50, item 5: attention per stack. A flash kernel's rate is a curve in sequence length
// and head dim (hardware.hpp's FlashCurve), one per kernel a GPU has measured; a job names
// its stack's kernel (training.attention_impl). Checked against the published bars the
// profiles cite (FA-README fwd+bwd charts, reference/microbench.md §2.1-2.2), against hand
// arithmetic, and against the job rules.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <string>

#include "partune/costmodel/calibration_fit.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/scenario.hpp"

using namespace partune;

namespace {

const std::array<double, 6> kSeqs{512, 1024, 2048, 4096, 8192, 16384};

// Every bar of one panel (TFLOP/s, causal, forward + backward) within `tolerance` of the curve.
void check_bars(const FlashCurve& c, double peak_tflops, double head_dim, const std::array<double, 6>& bars,
                double tolerance) {
  for (std::size_t i = 0; i < kSeqs.size(); ++i) {
    INFO("seq " << kSeqs[i] << " head dim " << head_dim);
    CHECK(c.at(kSeqs[i], head_dim) * peak_tflops == Approx(bars[i]).epsilon(tolerance));
  }
}

}  // namespace

TEST_CASE("the profiles' flash curves reproduce the FA-README bars they cite", "[attention][profiles]") {
  const GpuProfile h100 = load_instance_type("p5.48xlarge").gpu;
  // MB §2.2, flash2_h100_fwd_bwd_benchmark, FlashAttention-2 causal panels.
  const FlashCurve fa2 = h100.attention.curve(AttentionKernel::flash2);
  check_bars(fa2, 989, 64, {141, 192, 232, 257, 273, 284}, 0.03);
  check_bars(fa2, 989, 128, {163, 221, 265, 294, 308, 328}, 0.03);
  const GpuProfile a100 = load_instance_type("p4d.24xlarge").gpu;
  // MB §2.1, flash2_a100_fwd_bwd_benchmark, causal hd128: FlashAttention v1 and v2.
  CHECK(a100.attention.kernel == AttentionKernel::flash1);
  check_bars(a100.attention.curve(AttentionKernel::flash1), 312, 128, {55, 62, 69, 76, 80, 83}, 0.07);
  check_bars(a100.attention.curve(AttentionKernel::flash2), 312, 128, {99, 133, 155, 173, 182, 189}, 0.03);
  check_bars(a100.attention.curve(AttentionKernel::flash2), 312, 64, {88, 119, 140, 156, 165, 171}, 0.03);
}

TEST_CASE("a curve's shape, written out by hand", "[attention]") {
  const FlashCurve c{0.5, 1000, 20};
  // s / (s + 1000) at 1000 tokens is 1/2; the head-dim factor is 1 at 128.
  CHECK(c.at(1000, 128) == Approx(0.25));
  // At head dim 64: (64 / 84) / (128 / 148) = 0.88095...
  CHECK(c.at(1e12, 64) == Approx(0.5 * (64.0 / 84.0) / (128.0 / 148.0)));
  const FlashCurve flat{0.3, 0, 0};
  CHECK(flat.at(512, 64) == Approx(0.3));
  CHECK(flat.at(65536, 256) == Approx(0.3));
}

TEST_CASE("fit_flash finds the curve its samples were timed on", "[attention][calibration]") {
  // Times of an ideal kernel at 0.5 of a 1e15 peak, seq_half 1500, no overhead:
  // t = 7 bh s^2 d / (peak 0.5 s / (s + 1500)) (FlashAttention's causal fwd + bwd FLOPs).
  std::vector<calibration::FlashSample> samples;
  for (const double s : {1024.0, 2048.0, 4096.0, 8192.0}) {
    const double bh = 16, d = 128;
    samples.push_back({bh, s, d, 7.0 * bh * s * s * d / (1e15 * 0.5 * s / (s + 1500.0))});
  }
  const calibration::FlashFit f = calibration::fit_flash(samples, 1e15, 0.0);
  CHECK(f.flash_efficiency == Approx(0.5).epsilon(1e-3));
  CHECK(f.seq_half == Approx(1500).margin(1));
  // One sequence length: a flat curve (no second point to place it).
  const calibration::FlashFit one = calibration::fit_flash({samples[1]}, 1e15, 0.0);
  CHECK(one.seq_half == 0);
  CHECK(one.flash_efficiency == Approx(0.5 * 2048.0 / 3548.0).epsilon(1e-6));
}

TEST_CASE("a recorded call's gradient accumulation is taken off", "[attention][calibration]") {
  // 32 heads of 2048 tokens at head dim 128 in bf16: q, k and v are 16 MiB each; each add
  // reads two and writes one: 9 x 16 MiB = 150,994,944 bytes, at 3e12 bytes/s 50.33 us.
  const auto out = calibration::without_gradient_accumulation({{32, 2048, 128, 409e-6}}, 3e12);
  CHECK(out.front().seconds == Approx(409e-6 - 150994944.0 / 3e12));
  CHECK_THROWS_AS(calibration::without_gradient_accumulation({{32, 2048, 128, 40e-6}}, 3e12), std::invalid_argument);
}

TEST_CASE("attention_impl picks the kernel a job runs, and only one the GPU has a curve for", "[attention][job]") {
  const std::string base =
      "model: {name: t, layers: 2, hidden: 4096, heads: 32, seq_len: 2048, vocab: 32000}\n"
      "cluster: {instance_type: p4d.24xlarge, nodes: 1}\n"
      "parallel: {flash_attention: true, tensor_parallel_degree: 8}\n";
  const Job v1 = parse_job(base + "training: {global_batch: 8, precision: bf16}\n", "v1.yaml");
  const Job v2 = parse_job(base + "training: {global_batch: 8, precision: bf16, attention_impl: flash2}\n", "v2.yaml");
  REQUIRE(v2.training.attention_impl == AttentionKernel::flash2);
  const GpuProfile& gpu = v1.cluster.instance.gpu;
  const auto core = [&](const Job& j) {
    const LayerTime t = plan_time(gpu, transformer_layer_plan(j.model, plan_config(j)), Precision::bf16, true);
    return t.attention_fwd + t.attention_bwd;
  };
  // The cited bars at 2048 tokens, head dim 128: FA2 155, FA v1 69 TF/s (MB §2.1); the curves
  // give each within the fits' residuals, so the cores' time ratio is theirs within 8%.
  CHECK(core(v1) / core(v2) == Approx(155.0 / 69.0).epsilon(0.08));
  try {
    parse_job(base + "training: {global_batch: 8, precision: bf16, attention_impl: flash3}\n", "v3.yaml");
    FAIL("flash3 on an A100 profile was accepted");
  } catch (const ScenarioError& e) {
    const std::string what = e.what();
    CHECK(what.find("training.attention_impl") != std::string::npos);
    CHECK(what.find("flash3") != std::string::npos);
  }
  CHECK_THROWS_AS(parse_job(base + "training: {global_batch: 8, attention_impl: fa9}\n", "bad.yaml"), ScenarioError);
}

TEST_CASE("a context-parallel ring's kernel sees its block of keys", "[attention][context]") {
  ModelSpec m;
  m.layers = 2, m.hidden = 4096, m.heads = 32, m.kv_heads = 32, m.ffn_hidden = 16384, m.seq_len = 32768, m.vocab = 32000;
  PlanConfig c;
  c.flash_attention = true;
  c.context_degree = 4;
  const auto seq_of = [&](ContextComm comm) {
    c.context_comm = comm;
    for (const PlanOp& op : transformer_layer_plan(m, c).ops)
      if (op.kind == PlanOpKind::attention_core) return op.seq;
    return -1.0;
  };
  CHECK(seq_of(ContextComm::p2p) == 8192);        // s / cp a step of the ring
  CHECK(seq_of(ContextComm::allgather) == 32768);  // every key gathered
  CHECK(seq_of(ContextComm::a2a) == 32768);        // whole sequences of the rank's heads
}
