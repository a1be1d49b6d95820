#pragma once
// The simulated ranks' timelines for simulate's --report page (html_report.cpp): each
// rank's compute stream and its other streams as two rows of intervals, coloured by what
// runs. Intervals of one kind closer than a 2000th of the step are drawn as one bar, so a
// page stays small whatever the step's instruction count.
#include <cstddef>

#include "partune/report/svg_chart.hpp"
#include "partune/sim/simulator.hpp"

namespace partune::report {

// The first `max_ranks` ranks that have events (none recorded: no rows).
TimelineChart rank_timeline(const sim::SimResult& r, std::size_t max_ranks);

}  // namespace partune::report
