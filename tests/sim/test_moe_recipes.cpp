// The 2026 mixture-of-experts recipes as they ran (scenarios/jobs/*-megatron.yaml, each
// citing its recipe file): every one is accepted, fits its GPUs, and the estimator and the
// simulator agree on its step within 5% (issue 52's "must show"). One gap stays visible:
// DeepSeek-V3 on GB200 fits by the estimator's memory (167.5 of 173.2 GiB) but its
// simulated timeline peaks at 179.1 GiB (issue 52, open); its timeline check is expected
// to fail until that is found.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

TEST_CASE("MoE recipes that ran: accepted, fitting, estimator and simulator within 5%", "[sim][moe][recipes]") {
  for (const char* name : {"deepseek-v3-h100-1024-megatron", "deepseek-v3-b200-256-megatron",
                           "deepseek-v3-gb200-256-megatron", "qwen3-235b-a22b-h100-256-megatron",
                           "qwen3-30b-a3b-h100-8-megatron", "gpt-oss-120b-h100-64-megatron"}) {
    INFO(name);
    const Job job = load_job(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/jobs/" + name + ".yaml");
    const Estimate e = estimate(job);
    CHECK(e.fits);
    const sim::SimResult r = sim::simulate(job);
    CHECK(r.metrics.step_time == Approx(e.step_time).epsilon(0.05));
    CHECK(r.metrics.memory.total() == Approx(e.memory.total()).epsilon(0.05));
    const bool timeline_gap = std::string(name) == "deepseek-v3-gb200-256-megatron";
    CHECK(r.metrics.fits != timeline_gap);
  }
}
