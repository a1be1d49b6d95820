// The zero-bubble schedule ZB-H1 simulated on hand-built hardware (ideal_hardware.hpp:
// GEMMs at peak, free links) against the published bubbles on a uniform 4-stage job:
//   1F1B:  step = m (F + B + W) + (p - 1)(F + B + W)
//   ZB-H1: step = m (F + B + W) + (p - 1)(F + B - W)       (Qi et al. 2023)
// with F a stage's forward, B its input gradients and W its weight gradients per
// micro-batch (the cost model's LayerTime per layer times the stage's layers); the
// estimator agrees; and memory: the first stage peaks as under 1F1B, the last holds the
// p - 1 deferred W's besides its one micro-batch in flight (schedule.hpp's closed form).
#include <catch2/catch.hpp>

#include "ideal_hardware.hpp"
#include "job_fixtures.hpp"
#include "partune/costmodel/activation_memory.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;
using partune::testing::ideal_instance;
using partune::testing::ideal_job;
using partune::testing::make_model;
using partune::testing::require_valid;

namespace {

constexpr int kLayers = 16;

// Pipeline-only on one node of p GPUs; a vocabulary of 8 keeps the embedding and head
// about 3e-4 of a stage (see test_closed_forms.cpp), untied so no end-of-step embedding sum.
Job pipeline_job(int p, int m, PipelineSchedule schedule) {
  Job j = ideal_job(make_model(kLayers, 512, 8, 2048, 8, 128), ideal_instance(p, 1e12), 1, m);
  j.model.tied_embeddings = false;
  j.parallel.pipeline_parallel_degree = p;
  j.parallel.microbatches = m;
  j.parallel.pipeline = schedule;
  return j;
}

sim::SimResult simulate(const Job& job) {
  sim::SimOptions o;
  o.use_symmetry = false;
  return sim::simulate(job, o);
}

}  // namespace

TEST_CASE("simulated 1F1B and ZB-H1 steps are the published formulas", "[sim][bubble][zb]") {
  const int p = 4;
  for (int m : {4, 8, 16}) {
    const Job one = pipeline_job(p, m, PipelineSchedule::one_f_one_b), zb = pipeline_job(p, m, PipelineSchedule::zb_h1);
    require_valid(one);
    require_valid(zb);
    const LayerTime lt = layer_time(zb.cluster.instance.gpu, zb.model, Precision::fp16, 1, 1, false);
    const double per_stage = static_cast<double>(kLayers) / p;
    const double F = per_stage * lt.forward(), B = per_stage * lt.backward_input(), W = per_stage * lt.backward_weight();
    REQUIRE(W > 0);
    REQUIRE(B > W);  // the attention core's backward is all input gradient
    INFO("m " << m << " F " << F << " B " << B << " W " << W);
    const sim::SimResult r1 = simulate(one), rz = simulate(zb);
    CHECK(r1.metrics.step_time == Approx(m * (F + B + W) + (p - 1) * (F + B + W)).epsilon(1e-3));
    CHECK(rz.metrics.step_time == Approx(m * (F + B + W) + (p - 1) * (F + B - W)).epsilon(1e-3));
    // Every rank computes the same work under both.
    for (const sim::RankResult& rr : rz.ranks) CHECK(rr.compute_busy == Approx(m * (F + B + W)).epsilon(1e-3));
    // The estimator's bubble is the same formula.
    CHECK(estimate(zb).step_time == Approx(rz.metrics.step_time).epsilon(2e-3));
  }
}

TEST_CASE("ZB-H1's memory: stage 0 as 1F1B, the last stage p - 1 deferred W's more", "[sim][memory][zb]") {
  const int p = 4, m = 8;
  const Job one = pipeline_job(p, m, PipelineSchedule::one_f_one_b), zb = pipeline_job(p, m, PipelineSchedule::zb_h1);
  const sim::SimResult r1 = simulate(one), rz = simulate(zb);
  REQUIRE(r1.ranks.size() == static_cast<std::size_t>(p));
  REQUIRE(rz.ranks.size() == static_cast<std::size_t>(p));
  // What a stage's W needs of one micro-batch after its B: its layers' GEMM inputs and
  // output gradients (4 layers of the 512-wide, 2048-FFN block at b = 1, s = 128, fp16).
  const double held = (kLayers / p) * weight_gradient_bytes_by_kind(zb, 1.0).dense;
  // By hand: QKV 128 x (512 + 1536), projection 128 x (512 + 512), fc1 128 x (512 + 2048),
  // fc2 128 x (2048 + 512) elements, 2 bytes each.
  CHECK(weight_gradient_bytes_by_kind(zb, 1.0).dense == Approx(2.0 * 128 * (2048 + 1024 + 2560 + 2560)));
  CHECK(rz.ranks[0].peak_memory == Approx(r1.ranks[0].peak_memory).epsilon(1e-9));
  CHECK(rz.ranks[p - 1].peak_memory - r1.ranks[p - 1].peak_memory == Approx((p - 1) * held).epsilon(1e-6));
  // The estimator's stage memory walks the same schedule.
  CHECK(stage_memory(zb, p - 1).activations - stage_memory(one, p - 1).activations ==
        Approx((p - 1) * held).epsilon(1e-6));
}

TEST_CASE("simulated bubble rates at F = B = W: 1F1B (p-1)/m, ZB-H1 (p-1)/(3m), ZBV (p-1)/(6m)", "[sim][bubble][zb]") {
  // 16-token sequences make the attention core 0.5% of a layer's GEMMs, so a layer's
  // forward, input gradients and weight gradients each take one GEMM pass (F = B = W to
  // 1%). The zero-bubble papers' table: 1F1B (p - 1) / m, ZB-H1 (p - 1) / (3 m), ZBV "0";
  // exactly, ZBV keeps the V's ramp, (p - 1) chunk forwards: (p - 1) / (6 m).
  const int p = 4, m = 8;
  struct Case {
    PipelineSchedule schedule;
    double rate;
  };
  for (const Case c : {Case{PipelineSchedule::one_f_one_b, (p - 1.0) / m}, Case{PipelineSchedule::zb_h1, (p - 1.0) / (3 * m)},
                       Case{PipelineSchedule::zbv, (p - 1.0) / (6 * m)}}) {
    Job job = ideal_job(make_model(kLayers, 512, 8, 2048, 8, 16), ideal_instance(p, 1e12), 1, m);
    job.model.tied_embeddings = false;
    job.parallel.pipeline_parallel_degree = p;
    job.parallel.microbatches = m;
    job.parallel.pipeline = c.schedule;
    job.parallel.virtual_stages = v_shaped(c.schedule) ? 2 : 1;
    require_valid(job);
    INFO(to_string(c.schedule));
    const sim::SimResult r = simulate(job);
    const double busy = r.ranks[0].compute_busy;
    CHECK(r.metrics.step_time / busy - 1.0 == Approx(c.rate).margin(0.004));
  }
}
