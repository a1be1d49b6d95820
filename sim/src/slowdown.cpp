#include "slowdown.hpp"

#include <algorithm>

namespace partune::sim {

namespace {

// A round that owes less than this (seconds) ends the iteration: three orders of
// magnitude below the microsecond that traces resolve and below any kernel the cost
// model sizes, and it keeps the rounds from chasing rounding noise.
constexpr double kNegligibleStall = 1e-9;

// Rounds simulated one by one before the rest of the series may be summed in closed
// form. The first rounds are where collectives end inside the window and the slowing
// factor changes; after a few, those still running usually run on past the kernels,
// the factor is constant and the series is geometric.
constexpr int kExactRounds = 4;

// Cap on the rounds. When the collectives still running have (1 - overlap) adding up to
// 1 or more, each round owes at least as much as the one before and the series has no
// sum: rounds then go on until those collectives end, and the cap stops them regardless
// (whatever would have been owed after it is not paid) so a rank can never spin.
constexpr int kMaxRounds = 64;

}  // namespace

void pay_compute_slowdown(const RunningCollectives& running, double t0, double t1, ExposedComm& exposed,
                          const std::function<void(double seconds)>& run_kernels) {
  if (running.by_issue().empty()) return;  // nothing ran beside these kernels
  double from = t0, to = t1;
  for (int round = 0;; ++round) {
    double stall = 0, still_running = 0;  // still_running: sum of (1 - overlap) of those not done
    for (const auto& [index, r] : running.by_issue()) {
      const double until = r->end >= 0 ? std::min(r->end, to) : to;
      const double overlapped = until - std::max(r->start, from);
      if (overlapped <= 0) continue;
      const double owed = (1.0 - r->compute_overlap) * overlapped;
      stall += owed;
      book_exposed(exposed, r->instruction->group, owed);
      if (r->end < 0 || r->end > to) still_running += 1.0 - r->compute_overlap;
    }
    if (stall < kNegligibleStall) return;
    if (round >= kExactRounds && still_running > 0 && still_running < 1) {
      // The rest of the geometric series in one step: collectives still running keep
      // slowing the stall by the same factor (exact while they last; they usually do).
      const double tail = stall / (1.0 - still_running);
      for (const auto& [index, r] : running.by_issue())
        if (r->end < 0 || r->end > to)
          book_exposed(exposed, r->instruction->group, (tail - stall) * (1.0 - r->compute_overlap) / still_running);
      run_kernels(tail);
      return;
    }
    from = s4u::Engine::get_clock();
    run_kernels(stall);
    to = s4u::Engine::get_clock();
    if (round >= kMaxRounds) return;
  }
}

}  // namespace partune::sim
