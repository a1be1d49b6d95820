// The size gate: its instruction count bounds what build_program really builds (the
// reference), within a small factor, and a simulation over the limit is refused with
// both figures.
#include <catch2/catch.hpp>

#include <algorithm>

#include "job_fixtures.hpp"
#include "partune/costmodel/program.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/simulation_size.hpp"

using namespace partune;
using partune::testing::p4d_job;
using partune::testing::require_valid;

namespace {

// The longest program any rank of `job` runs.
double longest_program(const Job& job, Granularity g) {
  ProgramOptions o;
  o.granularity = g;
  std::size_t most = 0;
  for (int r = 0; r < job.world_size(); ++r) most = std::max(most, build_program(job, r, o).ops.size());
  return static_cast<double>(most);
}

}  // namespace

TEST_CASE("instructions_per_rank bounds build_program's count within a small factor", "[simulation-size]") {
  struct Case {
    const char* what;
    int pp, tp, sdp, microbatches, virtual_stages;
    Granularity g;
  };
  const Case cases[] = {
      {"data parallel only", 1, 1, 1, 4, 1, Granularity::chunk},
      {"pipeline and tensor", 4, 2, 1, 8, 1, Granularity::chunk},
      {"interleaved", 4, 1, 1, 8, 3, Granularity::chunk},
      {"per layer", 2, 2, 1, 8, 1, Granularity::layer},
      {"sharded", 2, 1, 2, 4, 1, Granularity::chunk},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Job j = p4d_job("gpt2-small", 1, 64);
    j.parallel.pipeline_parallel_degree = c.pp;
    j.parallel.tensor_parallel_degree = c.tp;
    j.parallel.sharded_data_parallel_degree = c.sdp;
    j.parallel.microbatches = c.microbatches;
    j.parallel.virtual_stages = c.virtual_stages;
    require_valid(j);
    const double built = longest_program(j, c.g);
    const double bound = instructions_per_rank(j, c.g);
    INFO("built " << built << ", bound " << bound);
    CHECK(bound >= built);
    CHECK(bound <= 8 * built);
  }
}

TEST_CASE("a simulation over the limit is refused with its size and the limit", "[simulation-size]") {
  Job j = p4d_job("gpt2-small", 120, 960 * 64);
  j.parallel.microbatches = 64;
  require_valid(j);
  const SimulationSize s = simulation_size(j, 960, Granularity::chunk, false);
  // 960 ranks x (64 micro-batches x 16 + 12 layers x 12 + 32) instructions.
  CHECK(s.instructions == Approx(960.0 * (64 * 16 + 12 * 12 + 32)));
  CHECK(s.events == 0);
  CHECK_NOTHROW(check_simulation_size(j, s, 1e12, "hint"));
  try {
    check_simulation_size(j, s, 1 << 20, "use estimate");
    FAIL("not refused");
  } catch (const ScenarioError& e) {
    CHECK(e.file() == j.name);
    CHECK_THAT(e.reason(), Catch::Contains("960 ranks") && Catch::Contains("the limit is 0.000977 GiB") &&
                               Catch::Contains("use estimate"));
  }
  const SimulationSize too_many = simulation_size(j, 2.0 * kMaxSimulatedRanks, Granularity::chunk, false);
  CHECK_THROWS_AS(check_simulation_size(j, too_many, 1e30, "hint"), ScenarioError);
}
