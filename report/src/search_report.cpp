// What `partune search` prints (search_report.hpp).
#include "partune/report/search_report.hpp"

#include <fmt/format.h>

#include <cmath>
#include <fmt/ranges.h>

#include "partune/costmodel/training_cost.hpp"
#include "partune/costmodel/units.hpp"
#include "partune/search/fit_advice.hpp"
#include "partune/search/twins.hpp"
#include "partune/report/report_units.hpp"

namespace partune::report {

namespace {
const StepMetrics& best_view(const search::Candidate& c) { return c.simulated ? c.simulation : c.estimate; }

nlohmann::json candidate_json(const search::Candidate& c) {
  const StepMetrics& v = best_view(c);
  const StepBreakdown& b = c.estimate.breakdown;
  return {{"configuration", c.configuration},
          {"pipeline_parallel_degree", c.job.parallel.pipeline_parallel_degree},
          {"tensor_parallel_degree", c.job.parallel.tensor_parallel_degree},
          {"data_parallel_degree", c.job.data_parallel_degree()},
          {"context_parallel_degree", c.job.parallel.context_parallel_degree},
          {"cp_comm_type", to_string(c.job.parallel.cp_comm_type)},
          {"sharded_data_parallel_degree", c.job.parallel.sharded_data_parallel_degree},
          {"microbatches", c.job.parallel.microbatches},
          {"microbatch_size", c.job.microbatch_size()},
          {"pipeline", to_string(c.job.parallel.pipeline)},
          {"virtual_stages", c.job.parallel.virtual_stages},
          {"stage_layers", c.job.parallel.stage_layers},
          {"lm_head_stage", to_string(c.job.parallel.lm_head_stage)},
          {"checkpointed_layers", c.job.parallel.checkpointed_layers},
          {"placement_strategy", c.job.parallel.placement_strategy.name()},
          {"activation_checkpointing", to_string(c.job.parallel.activation_checkpointing)},
          {"offload_activations", c.job.parallel.offload_activations},
          {"offload_optimizer", c.job.parallel.offload_optimizer},
          {"offload_parameters", c.job.parallel.offload_parameters},
          {"shard_optimizer_state", c.job.parallel.shard_optimizer_state},
          {"flash_attention", c.job.parallel.flash_attention},
          {"sharded_collective", to_string(c.job.parallel.sharded_collective)},
          {"simulated", c.simulated},
          {"beyond_simulation_budget", !c.beyond_budget.empty()},
          {"step_time_s", v.step_time},
          {"samples_per_s", v.samples_per_s},
          {"tflops_per_gpu", v.tflops_per_gpu},
          {"hw_tflops_per_gpu", v.hw_tflops_per_gpu},
          {"estimated_step_time_s", c.estimate.step_time},
          {"peak_memory_bytes", c.estimate.memory.total()},
          {"headroom_bytes", c.estimate.memory_capacity - c.estimate.memory.total()},
          // The estimator's exposed parts: they add up to estimated_step_time_s.
          {"breakdown_s", {{"compute", b.compute}, {"tensor_parallel", b.tensor_parallel_comm},
                           {"context_parallel", b.context_parallel_comm}, {"expert_parallel", b.expert_parallel_comm},
                           {"pipeline", b.pipeline_bubble + b.pipeline_drain_waits + b.pipeline_p2p},
                           {"data_parallel", b.data_parallel_exposed}, {"sharded", b.sharded_exposed},
                           {"offload", b.offload_exposed}, {"optimizer", b.optimizer}}}};
}

// "  also: DPT" after a row whose twins (search/twins.hpp) are not shown.
std::string twins_note(const search::SearchReport& r, const search::TwinGroup& g) {
  if (g.twins.empty()) return "";
  std::vector<std::string> orders;
  for (std::size_t i : g.twins) orders.push_back(r.ranked[i].job.parallel.placement_strategy.name());
  return fmt::format("  also: {}", fmt::join(orders, ", "));
}

// The table of the best `rows` distinct configurations, twins folded into one row.
std::string candidate_table(const search::SearchReport& r, const std::vector<search::TwinGroup>& groups, int rows) {
  std::string s = fmt::format("{:>3}  {:<52} {:>9} {:>9} {:>7} {:>8}  {:>7} {:>8} {:>7} {:>7} {:>7}\n", "#",
                              "configuration", "samples/s", "estimated", "TFLOPs", "headroom", "compute", "tp/cp/ep",
                              "pipe", "data", "shard");
  const int n = std::min<int>(rows, static_cast<int>(groups.size()));
  for (int i = 0; i < n; ++i) {
    const search::Candidate& c = r.ranked[groups[i].first];
    const StepMetrics& v = best_view(c);
    const StepBreakdown& b = c.estimate.breakdown;
    const double step = c.estimate.step_time;
    auto pct = [&](double x) { return fmt::format("{:.0f}%", 100 * x / step); };
    s += fmt::format("{:>3}  {:<52} {:>9.2f} {:>9.2f} {:>7.1f} {:>8}  {:>7} {:>8} {:>7} {:>7} {:>7}{}\n", i + 1,
                     c.configuration, v.samples_per_s, c.estimate.samples_per_s, v.tflops_per_gpu,
                     gib(c.estimate.memory_capacity - c.estimate.memory.total()), pct(b.compute),
                     pct(b.layer_comm()), pct(b.pipeline_bubble + b.pipeline_drain_waits + b.pipeline_p2p), pct(b.data_parallel_exposed),
                     pct(b.sharded_exposed), twins_note(r, groups[i]));
  }
  s += "  (samples/s and TFLOPs/GPU: simulated where simulated; the breakdown is the estimator's share of its step,\n"
       "   tp/cp/ep the layers' tensor, context and expert collectives;\n"
       "   also: placement orders predicted exactly alike, the same configuration to the model)\n";
  return s + search::describe_legend_line();
}
}  // namespace

std::string search_text(const Job& base, const search::SearchReport& r, const TrainingCostOptions& budget, int rows) {
  std::string s = fmt::format("search: {} on {} x {} ({} GPUs), global batch {}\n", base.model.name, base.cluster.nodes,
                              base.cluster.instance.name, base.world_size(), base.training.global_batch);
  s += fmt::format("  enumerated {}, invalid {}, duplicate placements {}, estimated {} ({:.2f} s), pruned: {} do not "
                   "fit in {:.0f}% of the HBM, {} dominated; re-partitioned {}; simulated {} ({:.2f} s){}\n\n",
                   r.enumerated, r.invalid, r.duplicates, r.estimated, r.estimate_seconds, r.pruned_memory,
                   100.0 * (1.0 - r.memory_headroom), r.pruned_dominated, r.partitioned, r.simulated - r.beyond_budget,
                   r.simulate_seconds,
                   r.beyond_budget > 0 ? fmt::format(", {} beyond the simulation budget (estimated)", r.beyond_budget) : "");
  const std::vector<search::TwinGroup> groups = search::group_twins(r.ranked);
  s += candidate_table(r, groups, rows);
  const search::Candidate& best = r.ranked.front();
  const StepMetrics& v = best_view(best);
  s += fmt::format("\nbest: {}{}\n  {:.2f} samples/s, {:.1f} model TFLOPs/GPU ({:.1f} hardware), MFU {:.1f}%, "
                   "step {:.3f} s{}\n",
                   best.configuration, twins_note(r, groups.front()), v.samples_per_s, v.tflops_per_gpu,
                   v.hw_tflops_per_gpu, 100 * v.mfu, v.step_time, best.simulated ? " (simulated)" : " (estimated)");
  if (!best.beyond_budget.empty()) s += "  not simulated: " + best.beyond_budget + "\n";
  if (groups.size() > 1) {  // the runner-up: the best configuration that is not a twin of the winner
    const search::Candidate& runner_up = r.ranked[groups[1].first];
    s += fmt::format("  why it wins: {:.1f}% faster than the runner-up ({}); its step is {:.0f}% compute, the rest "
                     "exposed communication and bubble\n",
                     100 * (best_view(runner_up).step_time / v.step_time - 1), runner_up.configuration,
                     100 * best.estimate.breakdown.compute / best.estimate.step_time);
  }
  if (r.has_tensor_across_nodes && r.has_pipeline_across_nodes) {
    const StepMetrics& t = best_view(r.best_tensor_across_nodes);
    const StepMetrics& p = best_view(r.best_pipeline_across_nodes);
    const bool both_simulated = r.best_tensor_across_nodes.simulated && r.best_pipeline_across_nodes.simulated;
    s += fmt::format("  model parallelism across nodes ({}): pipeline ({}) {:.2f} samples/s vs tensor ({}) {:.2f} "
                     "samples/s: pipeline is {:.2f}x {}\n",
                     both_simulated ? "simulated" : "estimated",
                     r.best_pipeline_across_nodes.configuration, p.samples_per_s,
                     r.best_tensor_across_nodes.configuration, t.samples_per_s,
                     p.samples_per_s / t.samples_per_s, p.samples_per_s >= t.samples_per_s ? "faster" : "slower");
  }
  if (budget.tokens > 0) {
    const TrainingCost c = training_cost(base, v.step_time, budget);
    s += fmt::format("  {:.3g} tokens: {:.0f} steps, {} on {} nodes", budget.tokens, c.steps, duration(c.seconds),
                     base.cluster.nodes);
    if (budget.on_demand_per_hour > 0)
      s += fmt::format(", cost {:.0f} at {:.2f} per node-hour", c.on_demand_usd, budget.on_demand_per_hour);
    if (c.goodput < 1)  // the same goodput for every candidate: the ranking stands
      s += fmt::format("; {} with failures (goodput {:.1f}%, a checkpoint every {})", duration(c.failure_seconds),
                       100 * c.goodput, duration(c.checkpoint_interval));
    s += "\n";
  }
  return s;
}

nlohmann::json search_json(const Job& base, const search::SearchReport& r, const TrainingCostOptions& budget) {
  nlohmann::json ranked = nlohmann::json::array();
  for (const auto& c : r.ranked) ranked.push_back(candidate_json(c));
  // Twins (search/twins.hpp) stay in the ranking, each naming the one the text shows.
  for (const search::TwinGroup& g : search::group_twins(r.ranked)) {
    ranked[g.first]["placement_twins"] = nlohmann::json::array();
    for (std::size_t i : g.twins) {
      ranked[g.first]["placement_twins"].push_back(r.ranked[i].job.parallel.placement_strategy.name());
      ranked[i]["twin_of_rank"] = g.first + 1;
    }
  }
  nlohmann::json j = {{"job", base.name},
                      {"gpus", base.world_size()},
                      {"enumerated", r.enumerated},
                      {"invalid", r.invalid},
                      {"duplicate_placements", r.duplicates},
                      {"estimated", r.estimated},
                      {"pruned_memory", r.pruned_memory},
                      {"memory_headroom", r.memory_headroom},
                      {"pruned_dominated", r.pruned_dominated},
                      {"simulated", r.simulated},
                      {"partitioned", r.partitioned},
                      {"best", candidate_json(r.ranked.front())},
                      {"ranked", ranked}};
  if (r.has_tensor_across_nodes) j["best_tensor_across_nodes"] = candidate_json(r.best_tensor_across_nodes);
  if (r.has_pipeline_across_nodes) j["best_pipeline_across_nodes"] = candidate_json(r.best_pipeline_across_nodes);
  if (budget.tokens > 0) {
    const TrainingCost c = training_cost(base, best_view(r.ranked.front()).step_time, budget);
    j["time_to_train_s"] = c.seconds;
    j["time_to_train_with_failures_s"] = std::isfinite(c.failure_seconds) ? nlohmann::json(c.failure_seconds)
                                                                           : nlohmann::json(nullptr);
    j["goodput"] = c.goodput;
    if (budget.on_demand_per_hour > 0) j["cost"] = c.on_demand_usd;
  }
  return j;
}

TrainingCostOptions search_budget(double tokens, double price_per_node_hour) {
  TrainingCostOptions o;
  o.tokens = tokens;
  o.on_demand_per_hour = price_per_node_hour;
  return o;
}

std::string search_failure(const Job& base, const search::SearchReport& r) {
  if (r.ranked.empty() && r.estimated == 0)
    return fmt::format("partune: no legal configuration in this space ({} combinations, all rejected by the job "
                       "rules: check --fix and the degrees' divisibility)\n",
                       r.enumerated);
  if (!r.ranked.empty()) return "";
  const double hbm = base.cluster.instance.gpu.hbm_bytes;
  std::string s = fmt::format("partune: no configuration fits: {} candidates need more than {:.1f} GiB a GPU ({:.1f} "
                              "GiB of HBM less the {:.0f}% headroom)",
                              r.pruned_memory, r.memory_limit / units::GiB, hbm / units::GiB,
                              100.0 * r.memory_headroom);
  s += r.rejected.empty() ? ".\n" : fmt::format("; the simulator ruled out the {} that fit by the estimate.\n",
                                                 r.rejected.size());
  for (std::size_t i = 0; i < r.rejected.size() && i < 3; ++i)
    s += "  " + r.rejected[i].configuration + ": " + r.rejected[i].rejection + "\n";
  const std::vector<search::ClosestMiss> misses = search::closest_misses(r, base);
  if (!misses.empty()) s += "The closest, one per layout (its variant with the least memory):\n";
  for (std::size_t i = 0; i < misses.size(); ++i) {
    const search::ClosestMiss& m = misses[i];
    s += fmt::format("  {}. {}: {:.1f} GiB short (needs {:.1f} GiB; {} candidates with these degrees, none fits)\n",
                     i + 1, m.configuration, m.shortfall_bytes / units::GiB, m.peak_bytes / units::GiB, m.variants);
    if (m.changes.empty())
      s += "     no change tried fits it, alone or two together (state offload, gradient sharding, up to 16x the nodes)\n";
    for (std::size_t k = 0; k < m.changes.size(); ++k) {
      const search::FitChange& c = m.changes[k];
      const std::string what = !c.option.empty() ? c.option + " on the command line"
                                                 : c.keys + " in the job file (or --set " + c.set + ")";
      s += fmt::format("     {} {}: {:.1f} GiB, {} a step (estimated)\n",
                       m.together ? "fits with both:" : k == 0 ? "fits with" : "or with", what,
                       c.peak_bytes / units::GiB, seconds(c.step_time));
    }
  }
  s += "Why any candidate was dropped: --explain key=value (e.g. --explain pipeline_parallel_degree=8).\n";
  return s;
}

std::string search_output(const Job& base, const search::SearchReport& r, const SearchPrint& print,
                          const std::vector<std::string>& explain, const nlohmann::json& execution,
                          const std::string& execution_text) {
  std::string s;
  if (print.json) {
    nlohmann::json j = search_json(base, r, print.budget);
    j["rejected_by_simulator"] = nlohmann::json::array();
    for (const auto& c : r.rejected)
      j["rejected_by_simulator"].push_back({{"configuration", c.configuration}, {"reason", c.rejection}});
    if (!execution.is_null()) j["execution"] = execution;
    s = j.dump(2) + "\n";
  } else {
    s = search_text(base, r, print.budget, print.rows);
    if (!r.rejected.empty()) s += "\nruled out by the simulator (not the winner):\n";
    for (const auto& c : r.rejected) s += "  " + c.configuration + ": " + c.rejection + "\n";
    if (!execution.is_null()) s += execution_text;
  }
  if (!explain.empty()) {
    s += fmt::format("\nwhy candidates matching {} were dropped:\n", fmt::join(explain, " "));
    for (const auto& line : search::explain(r, base, explain)) s += "  " + line + "\n";
  }
  return s;
}

}  // namespace partune::report
