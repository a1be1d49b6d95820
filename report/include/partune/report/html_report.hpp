#pragma once
// The --report FILE.html pages of search, simulate and sweep: one self-contained page each
// (html_page.hpp, inline SVG from svg_chart.hpp, no script, no address outside it), the
// same input giving the same bytes. No I/O here: the caller writes the page.
#include <string>

#include <nlohmann/json.hpp>

#include "partune/costmodel/estimator.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/training_cost.hpp"
#include "partune/search/tuner.hpp"
#include "partune/sim/simulator.hpp"

namespace partune::report {

// search: every ranked candidate and every one the simulator ruled out, as throughput
// against memory headroom (candidates predicted exactly alike merged into one mark with
// their count, the winner ringed, the required headroom as a line); the best distinct
// configurations; the winner's step breakdown (estimator, and simulation when simulated)
// and memory per pipeline stage. `r` must have a winner (search_failure empty).
std::string search_html(const Job& base, const search::SearchReport& r, const TrainingCostOptions& budget);

// simulate: the step breakdown, estimator against simulation; the time of each simulated
// rank; the first 16 ranks' timelines when `r` has events (SimOptions::record_events);
// memory per stage (the cost model's parts, the timeline's peak beside them); the stage
// utilisation.
std::string simulation_html(const Job& job, const sim::SimResult& r, const Estimate& analytic);

// sweep: throughput, step time, memory and cost (time-to-train where no price is known)
// against the last axis, one curve per combination of the other axes, and every point in a
// table. `sweep` is the sweep's --json object (sweep_report.hpp's sweep_output), so every
// MPI rank's points are there; `origin` names the job.
std::string sweep_html(const std::string& origin, const nlohmann::json& sweep);

}  // namespace partune::report
