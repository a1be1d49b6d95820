// `partune validate --replay`: the GPU runs on record (docs/device-runs: a lent H100 and
// H200, 2026-11-26) predicted again on the profiles calibrated in the same runs, against
// what those runs measured. The measured figures are the runs' own (validate.json,
// breakdown.json); nothing here was fitted to them but the strided class's rate, which the
// second H100 run's profile measured (scenarios/clusters/p5.48xlarge.yaml says how).
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/validate/replay.hpp"

using namespace partune;

namespace {

const std::vector<validate::ReplayJob>& replayed() {
  static const std::vector<validate::ReplayJob> jobs =
      validate::replay_runs(std::string(PARTUNE_SOURCE_DIR) + "/docs/device-runs");
  return jobs;
}

const validate::ReplayJob& job(const std::string& run, const std::string& name) {
  for (const auto& j : replayed())
    if (std::filesystem::path(j.run).filename() == run && j.job == name) return j;
  FAIL("no replayed job " << run << "/" << name);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("every recorded GPU job is predicted again", "[replay]") {
  CHECK(replayed().size() == 20);  // 10 H100 runs of jobs, 10 H200
  for (const auto& j : replayed()) {
    INFO(j.run << " " << j.job);
    CHECK(j.predicted_step_s > 0);
    CHECK(j.measured_step_s > 0);
    CHECK_FALSE(j.kinds.empty());
  }
}

// The bf16 FlashAttention jobs on the H100, each call's measurement (the 20th percentile of
// 6 steps, runs agreeing within 0.7%), within the issue's 10%.
TEST_CASE("the H100's bf16 FlashAttention steps are predicted within 10%", "[replay]") {
  for (const auto& [run, name] : std::vector<std::pair<std::string, std::string>>{
           {"first-run", "validate-01-gpt-1.3b-flash"},
           {"second-run", "validate-01-gpt-1.3b-flash"},
           {"third-run", "validate-01-gpt-1.3b-flash"},
           {"first-run", "validate-04-llama-7b-4l-flash"},
           {"second-run", "validate-04-llama-7b-4l-flash"},
           {"first-run", "validate-03-gpt-1.3b-flash-ckpt"}}) {
    const validate::ReplayJob& j = job(run, name);
    INFO(run << " " << name << ": " << j.step_error_pct << "%");
    CHECK(std::abs(j.step_error_pct) <= 10.0);
  }
}

// The profiled steps (second and third H100 calls): the kernels between the GEMMs, by the
// profile's categories, within the issue's 20%.
TEST_CASE("the kernels between the GEMMs are predicted by category within 20%", "[replay]") {
  for (const auto& [run, name] : std::vector<std::pair<std::string, std::string>>{
           {"second-run", "validate-01-gpt-1.3b-flash"},
           {"third-run", "validate-01-gpt-1.3b-flash"},
           {"second-run", "validate-04-llama-7b-4l-flash"}}) {
    const validate::ReplayJob& j = job(run, name);
    std::map<std::string, double> error;
    for (const auto& c : j.categories) error[c.category] = c.error_pct;
    INFO(run << " " << name);
    REQUIRE(error.size() == 6);
    for (const char* c : {"elementwise", "reduction_norm", "copy", "optimizer"}) {
      INFO(c << ": " << error[c] << "%");
      CHECK(std::abs(error[c]) <= 20.0);
    }
  }
  // The first call profiled a scaled-down model: left out, and said so.
  const validate::ReplayJob& scaled = job("first-run", "validate-01-gpt-1.3b-flash");
  CHECK(scaled.categories.empty());
  CHECK(scaled.breakdown_note.find("another model") != std::string::npos);
}

// fp8 as the backend runs it (LibTorch's per-tensor current scaling: amax, divide, cast,
// and the transposes cuBLASLt's fp8 GEMMs need), within the issue's 15%.
TEST_CASE("the H100's fp8 steps are predicted within 15%", "[replay]") {
  for (const char* run : {"first-run", "second-run"}) {
    const validate::ReplayJob& j = job(run, "validate-06-gpt-1.3b-flash-fp8");
    INFO(run << ": " << j.step_error_pct << "%");
    CHECK(j.low_precision_gemms);
    CHECK(std::abs(j.step_error_pct) <= 15.0);
  }
}

// Where the whole suite stands, bounded at what it measured on 2026-11-29 (20 of 20 steps
// within target, 24 of 24 categories within 20%, median 2.0%, worst 7.0%); the GEMMs'
// profiled rate and the host's idle time are not predicted yet (docs/gpu-step.md).
TEST_CASE("the replayed suite does not fall back", "[replay]") {
  const validate::ReplaySummary s = validate::summarize_replay(replayed());
  CHECK(s.jobs == 20);
  CHECK(s.steps_within == 20);
  CHECK(s.categories_within == 24);
  CHECK(s.median_abs_step_error_pct <= 2.1);
  CHECK(s.worst_abs_step_error_pct <= 7.1);
}

TEST_CASE("a folder without recorded runs is refused by name", "[replay]") {
  const std::string dir = std::string(PARTUNE_SOURCE_DIR) + "/scenarios/device";
  try {
    (void)validate::replay_runs(dir);
    FAIL("expected a ScenarioError");
  } catch (const ScenarioError& e) {
    CHECK(e.file() == dir);
    CHECK(std::string(e.what()).find("validate.json") != std::string::npos);
  }
}

TEST_CASE("a recorded job that does not read is refused by file and key", "[replay]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "partune-replay-bad-run";
  std::filesystem::create_directories(dir);
  // The run's own profile beside it, as a device run records it.
  std::filesystem::copy_file(std::string(PARTUNE_SOURCE_DIR) + "/scenarios/clusters/h100-sxm-device.yaml",
                             dir / "h100-sxm-device.yaml", std::filesystem::copy_options::overwrite_existing);
  std::ofstream(dir / "validate.json") << R"({"jobs": [{"job": "x", "file": ")" << PARTUNE_SOURCE_DIR
                                       << R"(/scenarios/device/validate-01-gpt-1.3b-flash.yaml",
      "instance_type": "h100-sxm-device", "step_time": {"measured_s": "fast"}}]})";
  try {
    (void)validate::replay_runs(dir.string());
    FAIL("expected a ScenarioError");
  } catch (const ScenarioError& e) {
    CHECK(e.file() == (dir / "validate.json").string());
    CHECK(e.key() == "jobs[0]");
  }
  std::filesystem::remove_all(dir);
}
