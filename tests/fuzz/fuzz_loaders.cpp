// The fuzz target of the scenario loaders (issue 12): the job, published-table and
// instance-type readers, fed arbitrary bytes. The first byte picks the reader (its value
// modulo 3: 'i' instance type, 'j' job, 't' table, so a seed is a scenario file behind
// its letter); the rest is the file's text.
//
// What counts as a finding: a crash, a sanitizer report, an exception other than
// ScenarioError leaving a loader (every refusal must name file, key and reason), and,
// for a job the loader accepted, an estimate or a simulation size that is not a finite,
// non-negative number (nothing may be printed as inf or NaN). libFuzzer adds timeouts
// and memory limits (scripts/fuzz.sh sets them).
//
// Built twice: with -fsanitize=fuzzer under -DPARTUNE_FUZZ=ON (clang), and in every build
// as `fuzz_replay`, whose main feeds it the saved findings (tests/fuzz/regressions/), so
// each crash once found stays a regression test.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/simulation_size.hpp"
#include "partune/costmodel/table.hpp"
#include "partune/costmodel/program_builder.hpp"

namespace {

// A folder of this process's own, so that relative paths in the input resolve to nothing
// and parallel fuzzing jobs do not share a file; removed at exit.
char scratch[] = "/tmp/partune-fuzz-XXXXXX";

void remove_scratch() {
  std::remove((std::string(scratch) + "/input.yaml").c_str());
  rmdir(scratch);
}

const std::string& scratch_folder() {
  static const std::string folder = [] {
    if (!mkdtemp(scratch)) std::abort();
    std::atexit(remove_scratch);
    return std::string(scratch);
  }();
  return folder;
}

std::string write_scratch(const std::string& text) {
  const std::string path = scratch_folder() + "/input.yaml";
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz_loaders: %s: %s\n", what, detail.c_str());
  std::abort();
}

void require_finite(const char* what, double value) {
  if (!std::isfinite(value) || value < 0) finding("not a finite, non-negative number", what);
}

// An accepted job must give finite figures from the estimator and the size gate.
void check_accepted_job(const partune::Job& job) {
  const partune::Estimate e = partune::estimate(job);
  require_finite("estimate.step_time", e.step_time);
  require_finite("estimate.samples_per_s", e.samples_per_s);
  require_finite("estimate.tflops_per_gpu", e.tflops_per_gpu);
  require_finite("estimate.memory.total", e.memory.total());
  const partune::SimulationSize size =
      partune::simulation_size(job, job.cluster.gpu_count(), partune::Granularity::layer, true);
  require_finite("simulation_size.instructions", size.instructions);
  require_finite("simulation_size.bytes", size.bytes);
}

void load(std::uint8_t reader, const std::string& text) {
  switch (reader % 3) {
    case 0:
      partune::load_instance_type(write_scratch(text));
      break;
    case 1:
      check_accepted_job(partune::parse_job(text, scratch_folder() + "/job.yaml"));
      break;
    default:
      partune::load_tables({write_scratch(text)});
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    load(data[0], text);
  } catch (const partune::ScenarioError&) {
    // The refusal the loaders owe bad input.
  } catch (const std::exception& e) {
    finding("an exception other than ScenarioError left a loader", e.what());
  }
  return 0;
}
