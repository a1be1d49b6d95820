// parallel.overlap_p2p_comm in the simulator: receives posted before the compute ahead of
// them (the programs' posted_early flag). Estimator and simulator agree on it as on
// blocking hops (tests/sim/test_agreement.cpp's 10%), and it only ever shortens a step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/sim/simulator.hpp"

using namespace partune;

TEST_CASE("estimator and simulator agree on overlapped pipeline hops", "[sim][agreement][overlap]") {
  struct Layout {
    int nodes, pp, tp, v;
  };
  // Stages on nodes of their own (PDT) so that hops cross the network.
  const Layout layouts[] = {{2, 2, 8, 1}, {4, 4, 8, 1}, {4, 4, 8, 2}, {2, 4, 4, 2}};
  double worst = 0;
  for (const Layout& l : layouts)
    for (int m : {8, 16}) {
      auto job = [&](bool overlap) {
        return parse_job("model: gpt3-2.7b\ncluster: {instance_type: p5.48xlarge, nodes: " + std::to_string(l.nodes) +
                             "}\ntraining: {global_batch: " + std::to_string(m) +
                             ", precision: bf16}\nparallel: {pipeline_parallel_degree: " + std::to_string(l.pp) +
                             ", tensor_parallel_degree: " + std::to_string(l.tp) + ", microbatches: " +
                             std::to_string(m) + ", virtual_stages: " + std::to_string(l.v) +
                             ", placement_strategy: PDT, overlap_p2p_comm: " + (overlap ? "true" : "false") + "}\n",
                         "overlap.yaml");
      };
      const Job on = job(true), off = job(false);
      REQUIRE(on.data_parallel_degree() == 1);
      const double analytic = estimate(on).step_time;
      const double simulated = sim::simulate(on).metrics.step_time;
      const double blocking = sim::simulate(off).metrics.step_time;
      INFO("nodes " << l.nodes << " pp " << l.pp << " tp " << l.tp << " v " << l.v << " m " << m << ": estimator "
                    << analytic << " s, simulator " << simulated << " s (blocking hops " << blocking << " s)");
      CHECK(std::fabs(simulated / analytic - 1.0) <= 0.10);
      CHECK(simulated <= blocking * (1 + 1e-9));
      worst = std::max(worst, std::fabs(simulated / analytic - 1.0));
    }
  WARN("worst disagreement " << 100 * worst << "%");
}
