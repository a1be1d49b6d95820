// The --report pages of search and simulate (html_report.hpp); the sweep's is
// html_sweep.cpp.
#include "partune/report/html_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "partune/costmodel/units.hpp"
#include "partune/report/estimate_fields.hpp"
#include "partune/report/html_page.hpp"
#include "partune/report/report.hpp"
#include "partune/report/report_units.hpp"
#include "partune/report/svg_chart.hpp"
#include "partune/search/twins.hpp"
#include "html_timeline.hpp"

namespace partune::report {

namespace {

constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

const StepMetrics& best_view(const search::Candidate& c) { return c.simulated ? c.simulation : c.estimate; }

double headroom_gib(const StepMetrics& e) { return (e.memory_capacity - e.memory.total()) / units::GiB; }

// The step split as the text's breakdown rows (estimate_fields.hpp), one bar per view.
BarChart step_chart(const std::vector<std::pair<std::string, const StepMetrics*>>& views) {
  BarChart c;
  c.y_label = "seconds per step";
  c.unit = "s";
  for (const StepField& f : step_fields())
    if (f.label) c.layers.push_back({f.label, palette(c.layers.size()), true});
  for (const auto& [name, e] : views) {
    c.categories.push_back(fmt::format("{} ({})", name, seconds(e->step_time)));
    std::vector<double> parts;
    for (const StepField& f : step_fields())
      if (f.label) parts.push_back(e->breakdown.*f.value);
    c.values.push_back(parts);
  }
  return c;
}

// Each pipeline stage's memory by the cost model (memory.hpp's stage_memory), in GiB, the
// HBM and `limit` (NaN: none) as lines.
BarChart stage_memory_chart(const Job& job, double limit_bytes) {
  BarChart c;
  c.y_label = "GiB per GPU";
  c.unit = "GiB";
  const std::vector<std::string> names = {"parameters", "gradients", "optimizer states", "gathered parameters",
                                          "stored activations", "working set and logits (peak of the two)",
                                          "communication buffers", "reserved (context, allocator)"};
  for (const std::string& n : names) c.layers.push_back({n, palette(c.layers.size()), true});
  for (int s = 0; s < job.parallel.pipeline_parallel_degree; ++s) {
    const MemoryBreakdown m = stage_memory(job, s);
    c.categories.push_back(fmt::format("stage {}", s));
    std::vector<double> parts = {m.parameters, m.gradients,  m.optimizer_states,      m.gathered_parameters,
                                 m.activations, m.transient(), m.communication_buffers, m.reserved};
    for (double& p : parts) p /= units::GiB;
    c.values.push_back(parts);
  }
  c.lines.push_back({fmt::format("HBM ({})", gib(job.cluster.instance.gpu.hbm_bytes)),
                     job.cluster.instance.gpu.hbm_bytes / units::GiB});
  if (std::isfinite(limit_bytes))
    c.lines.push_back({fmt::format("limit with the headroom ({})", gib(limit_bytes)), limit_bytes / units::GiB});
  return c;
}

// --- search ---------------------------------------------------------------------------

enum Kind : std::size_t { simulated, beyond_budget, estimated, ruled_out };

std::vector<MarkStyle> candidate_styles() {
  return {{"simulated", palette(0), true},
          {"beyond the simulation budget (estimated)", palette(1), true},
          {"ranked by the estimator only", "#7f7f7f", false},
          {"ruled out by the simulator", palette(3), false}};
}

Kind kind_of(const search::Candidate& c, bool rejected) {
  if (rejected) return ruled_out;
  if (c.simulated) return simulated;
  return c.beyond_budget.empty() ? estimated : beyond_budget;
}

// One mark per distinct (kind, throughput, headroom): candidates predicted alike, merged.
struct MergedMark {
  ScatterMark mark;
  std::vector<std::string> configurations;
};

void add_candidate(std::vector<MergedMark>& marks, std::map<std::string, std::size_t>& index,
                   const search::Candidate& c, Kind kind, const std::string& why) {
  const StepMetrics& v = best_view(c);
  const std::string key = fmt::format("{}|{:.9g}|{:.9g}", static_cast<int>(kind), v.samples_per_s, headroom_gib(c.estimate));
  const auto [at, fresh] = index.emplace(key, marks.size());
  if (fresh) {
    MergedMark m;
    m.mark.x = headroom_gib(c.estimate);
    m.mark.y = v.samples_per_s;
    m.mark.style = kind;
    m.mark.count = 0;
    m.mark.tooltip = fmt::format("{:.2f} samples/s, step {}, headroom {:.2f} GiB{}", v.samples_per_s,
                                 seconds(v.step_time), m.mark.x, why.empty() ? "" : "\n" + why);
    marks.push_back(m);
  }
  MergedMark& m = marks[at->second];
  ++m.mark.count;
  m.configurations.push_back(c.configuration);
}

ScatterChart candidate_chart(const search::SearchReport& r) {
  std::vector<MergedMark> marks;
  std::map<std::string, std::size_t> index;
  for (const search::Candidate& c : r.ranked) add_candidate(marks, index, c, kind_of(c, false), c.beyond_budget);
  for (const search::Candidate& c : r.rejected) add_candidate(marks, index, c, ruled_out, c.rejection);
  ScatterChart chart;
  chart.x_label = "memory headroom per GPU (GiB, estimated)";
  chart.y_label = "samples/s";
  chart.styles = candidate_styles();
  for (MergedMark& m : marks) {
    std::string names;
    for (std::size_t i = 0; i < m.configurations.size() && i < 8; ++i) names += "\n" + m.configurations[i];
    if (m.configurations.size() > 8) names += fmt::format("\n... and {} more", m.configurations.size() - 8);
    m.mark.tooltip = (m.mark.count > 1 ? fmt::format("{} candidates: ", m.mark.count) : "") + m.mark.tooltip + names;
    chart.marks.push_back(m.mark);
  }
  chart.marks.front().highlighted = true;  // the winner: ranked first
  chart.marks.front().label = "best";
  if (r.memory_limit > 0)
    chart.x_lines.push_back({fmt::format("required headroom ({:.0f}% of HBM)", 100 * r.memory_headroom),
                             (r.ranked.front().estimate.memory_capacity - r.memory_limit) / units::GiB});
  return chart;
}

// The best distinct configurations, twins in one row.
void candidate_table(HtmlPage& page, const search::SearchReport& r) {
  std::vector<std::vector<std::string>> rows;
  const std::vector<search::TwinGroup> groups = search::group_twins(r.ranked);
  for (std::size_t i = 0; i < groups.size() && i < 20; ++i) {
    const search::Candidate& c = r.ranked[groups[i].first];
    const StepMetrics& v = best_view(c);
    std::string twins;
    for (std::size_t t : groups[i].twins) twins += (twins.empty() ? "" : ", ") + r.ranked[t].job.parallel.placement_strategy.name();
    rows.push_back({std::to_string(i + 1), c.configuration, fmt::format("{:.2f}", v.samples_per_s), seconds(v.step_time),
                    fmt::format("{:.2f} GiB", headroom_gib(c.estimate)),
                    c.simulated ? "simulated" : c.beyond_budget.empty() ? "estimated" : "estimated (beyond budget)",
                    twins});
  }
  page.table({"#", "configuration", "samples/s", "step", "headroom", "judged", "also (placement twins)"}, rows);
}

std::string search_summary(const Job& base, const search::SearchReport& r) {
  const search::Candidate& best = r.ranked.front();
  const StepMetrics& v = best_view(best);
  return fmt::format("{} on {} x {} ({} GPUs), global batch {}. Enumerated {}, estimated {}, pruned {} that do not fit "
                     "and {} dominated, simulated {}. Best: {}: {:.2f} samples/s, step {} ({}), MFU {:.1f}%, "
                     "headroom {:.2f} GiB.",
                     base.model.name, base.cluster.nodes, base.cluster.instance.name, base.world_size(),
                     base.training.global_batch, r.enumerated, r.estimated, r.pruned_memory, r.pruned_dominated,
                     r.simulated - r.beyond_budget, best.configuration, v.samples_per_s, seconds(v.step_time),
                     best.simulated ? "simulated" : "estimated", 100 * v.mfu, headroom_gib(best.estimate));
}

// --- simulate -------------------------------------------------------------------------

// Where each simulated rank's step went (at most the first 64 ranks).
BarChart rank_chart(const sim::SimResult& r) {
  BarChart c;
  c.y_label = "seconds";
  c.unit = "s";
  for (const char* n : {"compute", "tensor-parallel (exposed)", "data-parallel (exposed)", "sharded (exposed)",
                        "offload (exposed)", "pipeline waits and idle"})
    c.layers.push_back({n, palette(c.layers.size()), true});
  for (std::size_t i = 0; i < r.ranks.size() && i < 64; ++i) {
    const sim::RankResult& k = r.ranks[i];
    const sim::ExposedComm& x = k.exposed;
    const double busy = k.compute_busy + x.tensor + x.data + x.sharded + x.offload;
    c.categories.push_back(r.ranks.size() > 16 ? fmt::format("r{} s{}", k.rank, k.stage)  // short: many labels
                                               : fmt::format("rank {} (stage {})", k.rank, k.stage));
    c.values.push_back({k.compute_busy, x.tensor, x.data, x.sharded, x.offload,
                        std::max(0.0, r.metrics.step_time - busy)});
  }
  return c;
}

// The simulated ranks' peak over the timeline, the largest of each stage (NaN: none simulated).
std::vector<double> timeline_peaks(const Job& job, const sim::SimResult& r) {
  std::vector<double> peaks(static_cast<std::size_t>(job.parallel.pipeline_parallel_degree), kNone);
  for (const sim::RankResult& k : r.ranks) {
    double& p = peaks.at(static_cast<std::size_t>(k.stage));
    p = std::isnan(p) ? k.peak_memory / units::GiB : std::max(p, k.peak_memory / units::GiB);
  }
  return peaks;
}

BarChart utilisation_chart(const sim::SimResult& r) {
  BarChart c;
  c.y_label = "compute busy, % of the step";
  c.unit = "%";
  c.layers.push_back({"compute busy", palette(0), true});
  for (std::size_t s = 0; s < r.stage_utilisation.size(); ++s) {
    c.categories.push_back(fmt::format("stage {}", s));
    c.values.push_back({100 * r.stage_utilisation[s]});
  }
  return c;
}

}  // namespace

std::string search_html(const Job& base, const search::SearchReport& r, const TrainingCostOptions& budget) {
  HtmlPage page("partune search: " + base.name);
  page.paragraph(search_summary(base, r));
  const search::Candidate& best = r.ranked.front();
  if (budget.tokens > 0) {
    const TrainingCost c = training_cost(base, best_view(best).step_time, budget);
    page.paragraph(fmt::format("{:.3g} tokens: {:.0f} steps, {} on {} nodes{}.", budget.tokens, c.steps,
                               duration(c.seconds), base.cluster.nodes,
                               budget.on_demand_per_hour > 0 ? fmt::format(", cost {:.0f}", c.on_demand_usd) : ""));
  }
  page.heading("Candidates: throughput against memory headroom");
  page.figure(scatter_svg(candidate_chart(r)),
              fmt::format("Every ranked candidate ({}) and every one the simulator ruled out ({}); candidates predicted "
                          "exactly alike are one mark with their count (xN); the ring is the winner. Not drawn: {} "
                          "that do not fit and {} dominated, pruned before ranking. Hover a mark for its "
                          "configurations.",
                          r.ranked.size(), r.rejected.size(), r.pruned_memory, r.pruned_dominated));
  page.heading("Best distinct configurations");
  candidate_table(page, r);
  page.heading("The winner's step: " + best.configuration);
  std::vector<std::pair<std::string, const StepMetrics*>> views = {{"estimator", &best.estimate}};
  if (best.simulated) views.emplace_back("simulation", &best.simulation);
  page.figure(bar_svg(step_chart(views)), "Where the step goes on the critical stage (simulation: the critical rank).");
  page.heading("The winner's memory per pipeline stage");
  page.figure(bar_svg(stage_memory_chart(best.job, r.memory_limit > 0 ? r.memory_limit : kNone)),
              "Each stage's GPU by the cost model; the search requires the largest under the limit.");
  return page.str();
}

std::string simulation_html(const Job& job, const sim::SimResult& r, const Estimate& analytic) {
  HtmlPage page("partune simulate: " + job.name);
  page.preformatted(describe_job(job));
  page.paragraph(fmt::format("Simulated step {} (estimator {}), {:.2f} samples/s, MFU {:.1f}%, bubble fraction "
                             "{:.1f}%; {} of {} ranks simulated{}.",
                             seconds(r.metrics.step_time), seconds(analytic.step_time), r.metrics.samples_per_s,
                             100 * r.metrics.mfu, 100 * r.bubble_fraction, r.ranks.size(), job.world_size(),
                             r.symmetric ? " (identical replicas folded)" : ""));
  page.heading("Step breakdown: estimator and simulation");
  page.figure(bar_svg(step_chart({{"estimator", &analytic}, {"simulation", &r.metrics}})),
              "The estimator's critical stage and the simulation's critical rank (the one that finishes last).");
  page.heading("Time of each simulated rank");
  const std::string ranks = r.ranks.size() > 64 ? fmt::format("The first 64 of {} simulated ranks", r.ranks.size())
                                                : std::string("Every simulated rank");
  page.figure(bar_svg(rank_chart(r)), ranks + (r.ranks.size() > 16 ? " (rN sS: rank N, of stage S)." : "."));
  if (!r.events.empty()) {
    page.heading("Timeline of the simulated ranks");
    const TimelineChart timeline = rank_timeline(r, 16);
    page.figure(timeline_svg(timeline),
                fmt::format("{} of {} simulated ranks: each rank's compute stream and its other streams; instructions "
                            "of one kind that nearly touch are one bar. Hover a bar for its times.",
                            timeline.rows.size() / 2, r.ranks.size()));
  }
  page.heading("Memory per pipeline stage");
  BarChart memory = stage_memory_chart(job, kNone);
  memory.marks_name = "peak over the simulated timeline";
  memory.marks = timeline_peaks(job, r);
  page.figure(bar_svg(memory), "The cost model's parts of each stage's GPU; the dash is the largest peak a simulated "
                               "rank of that stage reached over the timeline.");
  page.heading("Stage utilisation");
  page.figure(bar_svg(utilisation_chart(r)), "Compute busy over the step, mean of each stage's simulated ranks.");
  return page.str();
}

}  // namespace partune::report
