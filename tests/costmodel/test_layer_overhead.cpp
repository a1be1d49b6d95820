// The host's fixed work per layer and micro-batch (GpuProfile::layer_overhead_fwd/_bwd,
// instance key gpu.layer_overhead_us, measured by calibrate on the CPU backend's layer):
// a layer plan's forward and backward grow by exactly those seconds, a full recompute by
// the forward's again, the embedding and head not at all; a one-rank step of m
// micro-batches through L layers by m L (forward + backward), plus m L forward when every
// layer is recomputed. Written out by hand below.
#include <catch2/catch.hpp>

#include <string>

#include "job_fixtures.hpp"
#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;

namespace {

constexpr double kForward = 300e-6, kBackward = 500e-6;

std::string job_text(const std::string& gpu, int microbatches, const std::string& checkpointing) {
  return "kind: job\n"
         "model: {name: small, layers: 4, hidden: 256, heads: 4, ffn_hidden: 1024, vocab: 512, seq_len: 128,\n"
         "        dropout: 0}\n"
         "cluster: {nodes: 1, instance_type: {base: local-cpu, gpus_per_node: 1" + gpu + "}}\n"
         "training: {global_batch: 16, precision: fp32, optimizer: adam}\n"
         "parallel: {microbatches: " + std::to_string(microbatches) + ", activation_checkpointing: " + checkpointing +
         "}\n";
}
const std::string kOverhead = ", gpu: {layer_overhead_us: {forward: 300, backward: 500}}";

}  // namespace

TEST_CASE("a layer's plan carries the host's fixed work, the embedding and head do not", "[layer-overhead]") {
  GpuProfile plain = load_instance_type("local-cpu").gpu, loaded = plain;
  REQUIRE(plain.layer_overhead_fwd == 0);
  loaded.layer_overhead_fwd = kForward;
  loaded.layer_overhead_bwd = kBackward;
  const ModelSpec m = testing::make_model(4, 256, 4, 1024, 512, 128);
  PlanConfig c;
  c.precision = Precision::fp32;
  const LayerTime a = plan_time(plain, transformer_layer_plan(m, c), Precision::fp32, false);
  const LayerTime b = plan_time(loaded, transformer_layer_plan(m, c), Precision::fp32, false);
  CHECK(b.forward() - a.forward() == Approx(kForward).epsilon(1e-9));
  CHECK(b.backward() - a.backward() == Approx(kBackward).epsilon(1e-9));
  CHECK(b.backward_weight() == a.backward_weight());
  CHECK(b.recompute_full - a.recompute_full == Approx(kForward).epsilon(1e-9));
  CHECK(b.recompute_selective == a.recompute_selective);
  for (const LayerPlan& p : {embedding_plan(m, c), head_plan(m, c)}) {
    CHECK(plan_time(loaded, p, Precision::fp32, false).forward() == plan_time(plain, p, Precision::fp32, false).forward());
    CHECK(plan_time(loaded, p, Precision::fp32, false).backward() == plan_time(plain, p, Precision::fp32, false).backward());
  }
}

TEST_CASE("a one-rank step grows by m L (forward + backward), and m L forward more when recomputed",
          "[layer-overhead]") {
  for (int m : {1, 4, 16}) {
    INFO(m << " micro-batches");
    const double plain = estimate(parse_job(job_text("", m, "none"), "plain")).step_time;
    const double loaded = estimate(parse_job(job_text(kOverhead, m, "none"), "loaded")).step_time;
    CHECK(loaded - plain == Approx(m * 4 * (kForward + kBackward)).epsilon(1e-6));
    const double plain_full = estimate(parse_job(job_text("", m, "full"), "plain")).step_time;
    const double loaded_full = estimate(parse_job(job_text(kOverhead, m, "full"), "loaded")).step_time;
    CHECK(loaded_full - plain_full == Approx(m * 4 * (2 * kForward + kBackward)).epsilon(1e-6));
  }
}

TEST_CASE("gpu.layer_overhead_us is read, written back, and refused when negative", "[layer-overhead]") {
  const Job job = parse_job(job_text(kOverhead, 4, "none"), "loaded");
  CHECK(job.cluster.instance.gpu.layer_overhead_fwd == Approx(kForward));
  CHECK(job.cluster.instance.gpu.layer_overhead_bwd == Approx(kBackward));
  const std::string yaml = instance_type_yaml(job.cluster.instance);
  CHECK(yaml.find("layer_overhead_us") != std::string::npos);
  CHECK(testing::scenario_error_key(
            job_text(", gpu: {layer_overhead_us: {forward: -1, backward: 500}}", 4, "none"), "bad") ==
        "cluster.instance_type.gpu.layer_overhead_us.forward");
  CHECK(testing::scenario_error_key(job_text(", gpu: {layer_overhead_us: {fwd: 1}}", 4, "none"), "bad") ==
        "cluster.instance_type.gpu.layer_overhead_us.fwd");
}
