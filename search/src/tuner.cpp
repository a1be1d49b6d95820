#include "partune/search/tuner.hpp"

#include "judge_points.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "partune/costmodel/placement.hpp"
#include "partune/search/partition.hpp"
#include "partune/costmodel/units.hpp"
#include "partune/sim/simulator.hpp"

namespace partune::search {

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

struct Fitting {
  Point point;
  double step_time;
  double peak_bytes;
};

// SMP's auto-partition on one candidate: split its layers by the partitioner (the head
// with the embedding when they are tied); keep the split if it is faster and fits.
void repartition(Candidate& c, double memory_weight, SearchReport& report) {
  const ParallelConfig& pc = c.job.parallel;
  if (pc.pipeline_parallel_degree <= 1 || pc.virtual_stages > 1) return;
  try {
    const std::vector<PartitionItem> items = model_items(c.job);
    const Partition part = partition_chain(items, pc.pipeline_parallel_degree, memory_weight);
    Job alt = c.job;
    alt.parallel.stage_layers = part.stage_layers;
    alt.parallel.lm_head_stage = c.job.model.tied_embeddings && part.stage_of.back() == 0 ? LmHeadStage::first
                                                                                          : LmHeadStage::last;
    if (check_job(alt)) return;
    const Estimate e = estimate(alt);
    if (e.fits && e.memory.total() <= report.memory_limit && e.step_time < c.estimate.step_time) {
      c.job = std::move(alt);
      c.estimate = e;
      ++report.partitioned;
    }
  } catch (const std::invalid_argument&) {
    // fewer layers than stages: nothing to split
  }
}

// The two ways of crossing nodes with model parallelism: the fastest fitting candidate
// of each (simulated with the top K when asked).
void find_contrasts(const Job& base, const std::vector<Fitting>& fitting, SearchReport& report) {
  const int G = base.cluster.instance.fabric_gpus();  // "across nodes": beyond NVLink
  const Fitting* best_tp = nullptr;
  const Fitting* best_pp = nullptr;
  for (const Fitting& f : fitting) {
    const int dp = base.world_size() / (f.point.pipeline * f.point.tensor);
    const Placement pl(f.point.placement, dp, f.point.pipeline, f.point.tensor);
    const bool tp_across = f.point.tensor > 1 && group_span(pl, Axis::tensor, G).nodes > 1;
    const bool pp_across = f.point.pipeline > 1 && group_span(pl, Axis::pipeline, G).nodes > 1 && !tp_across;
    if (tp_across && (!best_tp || f.step_time < best_tp->step_time)) best_tp = &f;
    if (pp_across && (!best_pp || f.step_time < best_pp->step_time)) best_pp = &f;
  }
  auto fill = [&](const Fitting* f, bool& has, Candidate& c) {
    if (!f) return;
    has = true;
    c.job = make_job(base, f->point);
    c.estimate = estimate(c.job);  // simulated with the top K, below
  };
  fill(best_tp, report.has_tensor_across_nodes, report.best_tensor_across_nodes);
  fill(best_pp, report.has_pipeline_across_nodes, report.best_pipeline_across_nodes);
}

// Dominated: another candidate is clearly faster (by the margin) and no larger. Sorted
// by step, a sweep keeps the smallest peak among the candidates faster by the margin.
std::vector<Fitting> prune_dominated(std::vector<Fitting> fitting, double margin, SearchReport& report) {
  std::sort(fitting.begin(), fitting.end(), [](const Fitting& a, const Fitting& b) {
    return a.step_time < b.step_time || (a.step_time == b.step_time && a.peak_bytes < b.peak_bytes);
  });
  std::vector<Fitting> survivors;
  std::size_t j = 0;
  double min_bytes = 0, min_bytes_step = 0;
  for (const Fitting& f : fitting) {
    const double threshold = (1.0 - margin) * f.step_time;
    while (j < fitting.size() && fitting[j].step_time <= threshold) {
      if (j == 0 || fitting[j].peak_bytes < min_bytes) min_bytes = fitting[j].peak_bytes, min_bytes_step = fitting[j].step_time;
      ++j;
    }
    if (j > 0 && min_bytes <= f.peak_bytes) {
      Pruned pr;
      pr.point = f.point;
      pr.stage = Pruned::Stage::dominated;
      pr.peak_bytes = f.peak_bytes;
      pr.step_time = f.step_time;
      pr.better_step = min_bytes_step;
      pr.better_bytes = min_bytes;
      report.pruned.push_back(pr);
      ++report.pruned_dominated;
    } else {
      survivors.push_back(f);
    }
  }
  return survivors;
}

// What the simulator sees of a candidate: its description, with the order of the data
// and pipeline axes left out when the tensor groups fill whole NVLink levels (tensor the
// fastest axis, its degree a multiple of the level): the two orders then only renumber the
// nodes of a uniform network (PDT and DPT with tp8 on 8-GPU nodes), so one simulation
// stands for both. Not with stragglers (they make nodes differ), context or expert groups.
std::string simulated_as(const Job& job, const SearchOptions& options) {
  const ParallelConfig& pc = job.parallel;
  const bool renumbers_nodes = options.slowdowns.empty() && pc.placement_strategy.axis(2) == Axis::tensor &&
                               pc.tensor_parallel_degree % job.cluster.instance.fabric_gpus() == 0 &&
                               pc.context_parallel_degree <= 1 && pc.expert_parallel_degree <= 1;
  if (!renumbers_nodes) return describe(job);
  Job canonical = job;
  canonical.parallel.placement_strategy = PlacementOrder::parse("DPT");
  return describe(canonical);
}

// Simulates the candidates in child processes and records each verdict: the simulated
// figures, why the simulator rules the candidate out, or that its simulation is beyond
// the budget (it keeps the estimator's figures).
void simulate_candidates(const std::vector<Candidate*>& batch, const SearchOptions& options, SearchReport& report) {
  sim::SimOptions so;
  so.in_child = options.in_simulation_child;
  so.slowdowns = options.slowdowns;
  // Each distinct simulation within the budget once; `simulation_of[i]` is batch[i]'s.
  std::vector<Job> jobs;
  std::vector<std::string> keys;
  std::vector<std::size_t> simulation_of;
  std::vector<Candidate*> simulated;
  for (Candidate* c : batch) {
    const SimulationSize size = sim::planned_simulation_size(c->job, so);
    if (size.instructions > options.simulation_budget) {
      c->beyond_budget = fmt::format("its simulation would hold {:.3g} instructions on {:.0f} ranks, more than the "
                                     "search's budget of {:.3g} (--simulation-budget): ranked by the estimator",
                                     size.instructions, size.ranks, options.simulation_budget);
      continue;
    }
    const std::string key = simulated_as(c->job, options);
    const auto it = std::find(keys.begin(), keys.end(), key);
    simulation_of.push_back(static_cast<std::size_t>(it - keys.begin()));
    simulated.push_back(c);
    if (it != keys.end()) continue;
    keys.push_back(key);
    jobs.push_back(c->job);
  }
  int workers = options.workers > 0 ? options.workers : static_cast<int>(std::thread::hardware_concurrency());
  const long total = static_cast<long>(jobs.size());
  const std::function<void(std::size_t)> progress = [&](std::size_t done) {
    if (options.progress) options.progress(static_cast<long>(done), total, "simulated");
  };
  const std::vector<sim::SimOutcome> outcomes = options.simulate_batch
                                                    ? options.simulate_batch(jobs, so, workers, progress)
                                                    : sim::simulate_each(jobs, so, workers, progress);
  for (std::size_t i = 0; i < simulated.size(); ++i) {
    Candidate& c = *simulated[i];
    const sim::SimOutcome& outcome = outcomes[simulation_of[i]];
    if (!outcome.ok) {
      c.rejection = "its simulation failed: " + outcome.error;
      ++report.simulation_failures;
      continue;
    }
    c.simulated = true;
    c.simulation = outcome.result.metrics;
    double peak = 0;  // the simulated timeline's, over the simulated ranks
    for (const sim::RankResult& r : outcome.result.ranks) peak = std::max(peak, r.peak_memory);
    if (!c.simulation.fits) {
      c.rejection = fmt::format("does not fit by the simulator: {} (the estimator's peak: {:.2f} GiB)",
                                c.simulation.not_fit_reason, c.estimate.memory.total() / units::GiB);
      ++report.simulated_too_large;
    } else if (peak > report.memory_limit) {
      c.rejection = fmt::format("the simulator's peak {:.2f} GiB leaves less than the {:.0f}% headroom of {:.1f} GiB "
                                "(memory_headroom)",
                                peak / units::GiB, 100.0 * report.memory_headroom,
                                c.simulation.memory_capacity / units::GiB);
      ++report.simulated_too_large;
    }
  }
}

// Tier 2: the best K by the estimator through the simulator (with the two cross-node
// contrasts when asked), those beyond the simulation budget judged by the estimator;
// while none of those is judged to fit, the next K. The ruled-out candidates leave
// `ranked` for `rejected`; the judged ones are ranked first, by their step.
void simulate_best(const SearchOptions& options, SearchReport& report) {
  const auto t1 = clock_type::now();
  const std::size_t k = static_cast<std::size_t>(std::max(1, options.top_k));
  auto has_winner = [&](std::size_t upto) {
    for (std::size_t i = 0; i < upto; ++i)
      if (report.ranked[i].judged() && report.ranked[i].rejection.empty()) return true;
    return false;
  };
  std::size_t from = 0;
  do {
    const std::size_t to = std::min(report.ranked.size(), from + k);
    std::vector<Candidate*> batch;
    for (std::size_t i = from; i < to; ++i) batch.push_back(&report.ranked[i]);
    if (from == 0 && options.simulate_contrasts) {
      if (report.has_tensor_across_nodes) batch.push_back(&report.best_tensor_across_nodes);
      if (report.has_pipeline_across_nodes) batch.push_back(&report.best_pipeline_across_nodes);
    }
    simulate_candidates(batch, options, report);
    report.simulated += static_cast<long>(to - from);
    from = to;
  } while (!has_winner(from) && from < report.ranked.size());
  report.simulate_seconds = seconds_since(t1);
  for (std::size_t i = 0; i < from; ++i) report.beyond_budget += report.ranked[i].beyond_budget.empty() ? 0 : 1;

  std::vector<Candidate> kept;
  for (Candidate& c : report.ranked) (c.rejection.empty() ? kept : report.rejected).push_back(std::move(c));
  report.ranked = std::move(kept);
  // Judged first (by simulated step, or by estimated step beyond the budget), then the
  // rest in estimator order; the sort is stable so ties keep the estimator's order.
  std::stable_sort(report.ranked.begin(), report.ranked.end(), [](const Candidate& a, const Candidate& b) {
    if (a.judged() != b.judged()) return a.judged();
    return a.score() < b.score();
  });
}

// Every candidate of the report named once, as its job finally stands (the reports print
// these names; a repartitioned candidate's stages are in its name).
void describe_candidates(SearchReport& report) {
  for (std::vector<Candidate>* list : {&report.ranked, &report.rejected})
    for (Candidate& c : *list) c.configuration = describe(c.job);
  if (report.has_tensor_across_nodes)
    report.best_tensor_across_nodes.configuration = describe(report.best_tensor_across_nodes.job);
  if (report.has_pipeline_across_nodes)
    report.best_pipeline_across_nodes.configuration = describe(report.best_pipeline_across_nodes.job);
}

}  // namespace

SearchReport run_search(const Job& base, const SearchSpace& space, const SearchOptions& options) {
  SearchReport report;
  report.memory_headroom = options.memory_headroom;
  report.memory_limit = (1.0 - options.memory_headroom) * base.cluster.instance.gpu.hbm_bytes;
  auto progress = [&](long done, long total, const char* what) {
    if (options.progress) options.progress(done, total, what);
  };

  // --- tier 1: every legal point through the estimator; what cannot fit is pruned.
  auto t0 = clock_type::now();
  std::vector<Point> points;
  const EnumerationStats stats = enumerate(base, space, [&](const Point& p) { points.push_back(p); });
  const std::vector<PointVerdict> verdicts =
      judge_points(base, points, report.memory_limit, options.workers, [&](long done) {
        if ((done & 0xFFFF) < 2048) progress(done, 0, "estimated");  // about every 65,536 points
      });
  report.estimated = static_cast<long>(points.size());
  std::vector<Fitting> fitting;
  for (std::size_t i = 0; i < points.size(); ++i) {
    const PointVerdict& v = verdicts[i];
    if (v.fits) {
      fitting.push_back({points[i], v.step_time, v.peak_bytes});
      continue;
    }
    Pruned pr;
    pr.point = points[i];
    pr.stage = Pruned::Stage::memory;
    pr.peak_bytes = v.peak_bytes;
    report.pruned.push_back(pr);
  }
  report.enumerated = stats.considered;
  report.invalid = stats.invalid;
  report.duplicates = stats.duplicates;
  report.pruned_memory = static_cast<long>(report.pruned.size());
  report.estimate_seconds = seconds_since(t0);
  report.enumerate_seconds = 0;  // enumeration is interleaved with estimation

  find_contrasts(base, fitting, report);
  const std::vector<Fitting> survivors = prune_dominated(std::move(fitting), options.dominance_margin, report);

  // --- tier 2: the best K by the estimator, re-evaluated by the simulator.
  const std::size_t keep = std::min<std::size_t>(survivors.size(), std::max(1, 4 * options.top_k));
  for (std::size_t i = 0; i < keep; ++i) {
    Candidate c;
    c.job = make_job(base, survivors[i].point);
    c.estimate = estimate(c.job);
    if (options.auto_partition) repartition(c, options.memory_weight, report);
    report.ranked.push_back(std::move(c));
  }
  std::stable_sort(report.ranked.begin(), report.ranked.end(),
                   [](const Candidate& a, const Candidate& b) { return a.estimate.step_time < b.estimate.step_time; });
  if (options.simulate && !report.ranked.empty()) simulate_best(options, report);
  describe_candidates(report);
  return report;
}

std::vector<std::string> explain(const SearchReport& report, const Job& base, const std::vector<std::string>& filters,
                                 std::size_t limit) {
  std::vector<std::string> lines;
  std::size_t matched = 0;
  for (const Pruned& pr : report.pruned) {
    const Job job = make_job(base, pr.point);
    if (!matches(job, filters)) continue;
    ++matched;
    if (lines.size() >= limit) continue;
    if (pr.stage == Pruned::Stage::memory) {
      const Estimate e = estimate(job);
      if (!e.fits)
        lines.push_back(fmt::format("{}: does not fit: {}", describe(job), e.not_fit_reason));
      else
        lines.push_back(fmt::format("{}: leaves {:.2f} GiB of {:.1f} GiB free, less than the {:.0f}% headroom "
                                    "(memory_headroom)",
                                    describe(job), (e.memory_capacity - e.memory.total()) / units::GiB,
                                    e.memory_capacity / units::GiB, 100.0 * report.memory_headroom));
    } else {
      lines.push_back(fmt::format("{}: dominated: {:.3f} s and {:.1f} GiB, while another candidate takes {:.3f} s "
                                  "with {:.1f} GiB",
                                  describe(job), pr.step_time, pr.peak_bytes / units::GiB, pr.better_step,
                                  pr.better_bytes / units::GiB));
    }
  }
  if (matched > lines.size())
    lines.push_back(fmt::format("... and {} more pruned candidates match", matched - lines.size()));
  if (matched == 0) {
    bool survived = false;
    for (const Candidate& c : report.ranked) survived = survived || matches(c.job, filters);
    lines.push_back(survived ? "no pruned candidate matches: matching candidates are among the ranked ones"
                             : "no candidate matches: the space or the job rules exclude it (check --fix and the "
                               "degrees' divisibility)");
  }
  return lines;
}

}  // namespace partune::search
