#include "report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/training_cost.hpp"
#include "partune/costmodel/units.hpp"
#include "partune/search/twins.hpp"
#include "partune/sim/explain.hpp"

namespace partune::cli {

namespace {

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / units::GiB); }

// What goes to the host: "off", or the activations, the optimizer and the parameters on.
std::string offload_text(const ParallelConfig& pc) {
  std::string s;
  auto add = [&](bool on, const char* what) {
    if (on) s += (s.empty() ? "" : "+") + std::string(what);
  };
  add(pc.offload_activations, "activations");
  add(pc.offload_optimizer, "optimizer");
  add(pc.offload_parameters, "parameters");
  return s.empty() ? "off" : s;
}

std::string seconds(double s) {
  if (s >= 1.0) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

std::string share(double part, double whole) {
  return whole > 0 ? fmt::format("{:5.1f}%", 100.0 * part / whole) : "";
}

nlohmann::json memory_json(const MemoryBreakdown& m) {
  return {{"stage", m.stage},
          {"parameters_bytes", m.parameters},
          {"gradients_bytes", m.gradients},
          {"optimizer_states_bytes", m.optimizer_states},
          {"gathered_parameters_bytes", m.gathered_parameters},
          {"activations_bytes", m.activations},
          {"activation_working_bytes", m.activation_working},
          {"logits_bytes", m.logits},
          {"communication_buffers_bytes", m.communication_buffers},
          {"reserved_bytes", m.reserved},
          {"host_offload_bytes", m.host_offload},
          {"total_bytes", m.total()}};
}

}  // namespace

std::string describe_job(const Job& job) {
  const auto& pc = job.parallel;
  const ModelSpec& m = job.model;
  const std::string active =
      m.is_moe() ? fmt::format(", {:.1f}B active, {} experts / {} per token", active_parameters(m) / 1e9, m.experts,
                               m.experts_per_token)
                 : std::string();
  std::string s = fmt::format("{}: {} ({:.1f}B parameters{}) on {} x {} ({} GPUs)\n", job.name, m.name,
                              total_parameters(m) / 1e9, active, job.cluster.nodes, job.cluster.instance.name,
                              job.world_size());
  const std::string experts =
      m.is_moe() ? fmt::format(", expert {}", pc.expert_parallel_degree) : std::string();
  s += fmt::format("  parallel: pipeline {} x tensor {} x data {} (sharded {}{}), placement {}\n",
                   pc.pipeline_parallel_degree, pc.tensor_parallel_degree, job.data_parallel_degree(),
                   pc.sharded_data_parallel_degree, experts, pc.placement_strategy.smp_name());
  s += fmt::format("  batch: {} sequences of {} tokens = {} micro-batches of {} x {} accumulation steps "
                   "per data-parallel rank\n",
                   job.training.global_batch, job.model.seq_len, pc.microbatches, job.microbatch_size(),
                   job.training.gradient_accumulation);
  s += fmt::format("  schedule {}{}, checkpointing {}, offload {}, optimizer sharding {}, "
                   "FlashAttention {}, sharded collective {}, {} {}\n",
                   pc.pipeline == PipelineSchedule::simple ? "GPipe" : "1F1B",
                   pc.virtual_stages > 1 ? fmt::format(" ({} virtual stages)", pc.virtual_stages) : "",
                   to_string(pc.activation_checkpointing), offload_text(pc),
                   pc.shard_optimizer_state ? "on" : "off", pc.flash_attention ? "on" : "off",
                   to_string(pc.sharded_collective), to_string(job.training.precision),
                   to_string(job.training.optimizer));
  return s;
}

std::string estimate_text(const Job& job, const Estimate& e) {
  const StepBreakdown& b = e.breakdown;
  std::string s = describe_job(job);
  s += "\n";
  s += fmt::format("step time            {}\n", seconds(e.step_time));
  s += fmt::format("throughput           {:.2f} samples/s, {:.0f} tokens/s\n", e.samples_per_s, e.tokens_per_s);
  s += fmt::format("model TFLOPs/GPU     {:.1f}   (3 x the layer plan's forward FLOPs, no recompute; for GPT "
                   "72·B·s·l·h²·(1+s/6h+V/12lh))\n",
                   e.tflops_per_gpu);
  s += fmt::format("hardware TFLOPs/GPU  {:.1f}   (recompute counted)\n", e.hw_tflops_per_gpu);
  s += fmt::format("MFU                  {:.1f}%  of {:.0f} TFLOP/s {} peak\n", 100 * e.mfu,
                   job.cluster.instance.gpu.peak_flops(job.training.precision) / 1e12,
                   to_string(job.training.precision));
  s += "\nstep time breakdown (critical stage)          time   share\n";
  auto row = [&](const char* name, double t, const std::string& extra = "") {
    s += fmt::format("  {:<36} {:>12} {}{}\n", name, seconds(t), share(t, e.step_time), extra);
  };
  row("compute (forward + backward)", b.compute,
      b.recompute > 0 ? fmt::format("  incl. recompute {}", seconds(b.recompute)) : "");
  row("tensor-parallel communication", b.tensor_parallel_comm);
  row("pipeline bubble", b.pipeline_bubble);
  if (b.pipeline_drain_waits > 0) row("pipeline drain (gradient buckets)", b.pipeline_drain_waits);
  row("pipeline send/recv (exposed)", b.pipeline_p2p);
  row("data-parallel gradients (exposed)", b.data_parallel_exposed,
      b.data_parallel_comm > 0 ? fmt::format("  of {} total", seconds(b.data_parallel_comm)) : "");
  row("sharded all-gather/reduce-scatter (exposed)", b.sharded_exposed,
      b.sharded_comm > 0 ? fmt::format("  of {} total", seconds(b.sharded_comm)) : "");
  row("offload copies (exposed)", b.offload_exposed,
      b.offload_traffic > 0 ? fmt::format("  of {} total", seconds(b.offload_traffic)) : "");
  row("optimizer step", b.optimizer);

  const MemoryBreakdown& m = e.memory;
  s += fmt::format("\nmemory per GPU (largest: pipeline stage {})\n", m.stage);
  auto mrow = [&](const char* name, double bytes) {
    if (bytes > 0) s += fmt::format("  {:<36} {:>12}\n", name, gib(bytes));
  };
  mrow("parameters", m.parameters);
  mrow("gradients", m.gradients);
  mrow("optimizer states", m.optimizer_states);
  mrow("gathered parameters (sharded DP)", m.gathered_parameters);
  mrow("stored activations", m.activations);
  mrow("activation working set", m.activation_working);
  mrow("logits and loss", m.logits);
  const double shared = m.logits + m.activation_working - m.transient();
  if (shared > 0) s += fmt::format("  {:<36} {:>12}\n", "  not live together (logits, working)", "-" + gib(shared));
  mrow("communication buffers", m.communication_buffers);
  mrow("reserved (context, allocator)", m.reserved);
  s += fmt::format("  {:<36} {:>12} of {}\n", "total", gib(m.total()), gib(e.memory_capacity));
  if (m.host_offload > 0) s += fmt::format("  {:<36} {:>12}\n", "offloaded to host (per GPU)", gib(m.host_offload));
  if (e.fits && m.total() <= e.memory_capacity) {
    s += fmt::format("fits: yes, headroom {} on the largest GPU\n", gib(e.memory_capacity - m.total()));
  } else if (e.fits) {  // the simulation judges by its timeline's peak, which can be below the sum
    s += fmt::format("fits on the timeline (below), though the parts above sum to {} over HBM\n",
                     gib(m.total() - e.memory_capacity));
  } else {
    s += fmt::format("DOES NOT FIT: {}\n", e.not_fit_reason);
  }
  return s;
}

nlohmann::json estimate_json(const Job& job, const Estimate& e) {
  const StepBreakdown& b = e.breakdown;
  nlohmann::json j;
  j["job"] = job.name;
  j["model"] = job.model.name;
  j["parameters"] = total_parameters(job.model);  // the whole model's, every parameter once
  j["gpus"] = job.world_size();
  j["step_time_s"] = e.step_time;
  j["samples_per_s"] = e.samples_per_s;
  j["tokens_per_s"] = e.tokens_per_s;
  j["tflops_per_gpu"] = e.tflops_per_gpu;
  j["hw_tflops_per_gpu"] = e.hw_tflops_per_gpu;
  j["mfu"] = e.mfu;
  j["model_flops_per_step"] = e.model_flops;
  j["hardware_flops_per_step"] = e.hardware_flops;
  j["peak_memory_bytes"] = e.memory.total();
  j["memory_capacity_bytes"] = e.memory_capacity;
  j["headroom_bytes"] = e.memory_capacity - e.memory.total();
  j["fits"] = e.fits;
  j["not_fit_reason"] = e.not_fit_reason;
  j["breakdown"] = {{"compute_s", b.compute},
                    {"recompute_s", b.recompute},
                    {"tensor_parallel_comm_s", b.tensor_parallel_comm},
                    {"pipeline_bubble_s", b.pipeline_bubble},
                    {"pipeline_drain_waits_s", b.pipeline_drain_waits},
                    {"pipeline_p2p_s", b.pipeline_p2p},
                    {"data_parallel_comm_s", b.data_parallel_comm},
                    {"data_parallel_exposed_s", b.data_parallel_exposed},
                    {"sharded_comm_s", b.sharded_comm},
                    {"sharded_exposed_s", b.sharded_exposed},
                    {"offload_traffic_s", b.offload_traffic},
                    {"offload_exposed_s", b.offload_exposed},
                    {"optimizer_s", b.optimizer}};
  j["memory"] = memory_json(e.memory);
  return j;
}

namespace {
double simulated_peak(const sim::SimResult& r) {
  double peak = 0;
  for (const auto& rank : r.ranks) peak = std::max(peak, rank.peak_memory);
  return peak;
}
}  // namespace

namespace {
// The estimator's step and the simulation's, part by part (sim/explain.hpp).
std::string comparison_text(const Estimate& analytic, const sim::SimResult& r) {
  const sim::EstimatorVsSimulation x = sim::explain_difference(analytic, r);
  std::string out = "\nestimator vs simulation                         estimator    simulation\n";
  out += fmt::format("  {:<44} {:>12} {:>12}  {:+.1f}%\n", "step time", seconds(x.estimated_step_s),
                     seconds(x.simulated_step_s), x.difference_pct);
  for (const sim::StepPart& p : x.parts)
    if (p.estimated_s != 0 || p.simulated_s != 0)
      out += fmt::format("  {:<44} {:>12} {:>12}\n", p.name, seconds(p.estimated_s), seconds(p.simulated_s));
  const sim::StepPart& largest = x.parts[static_cast<std::size_t>(x.largest)];
  const double gap = largest.simulated_s - largest.estimated_s;
  if (!x.agree)
    out += fmt::format("  largest difference: {} ({}{}): {}\n", largest.name, gap > 0 ? "+" : "-",
                       seconds(std::fabs(gap)), x.why);
  else
    out += "  they agree within 2% of the step on every part\n";
  return out;
}
}  // namespace

std::string simulation_text(const Job& job, const sim::SimResult& r, const Estimate& analytic) {
  // The memory section keeps the cost model's breakdown of the largest stage; whether it
  // fits is judged on the peak the simulation tracked over the timeline.
  // The headroom is the table's (the same total gives the same headroom as `estimate`);
  // the timeline's peak follows with its own.
  std::string s = estimate_text(job, r.metrics);
  // No wall-clock figures here: the same job must print byte-identical output
  // (`partune bench simulate` reports speed).
  s += fmt::format("\nsimulation: {} of {} ranks simulated{}, {} activities\n", r.ranks.size(), job.world_size(),
                   r.symmetric ? " (identical replicas / tensor ranks folded exactly)" : "", r.activities);
  s += fmt::format("bubble fraction      {:.1f}%\n", 100 * r.bubble_fraction);
  s += "stage utilisation   ";
  for (double u : r.stage_utilisation) s += fmt::format(" {:.0f}%", 100 * u);
  s += "\nexposed communication on the critical rank (the one that finishes last)\n";
  s += fmt::format("  tensor-parallel {}, pipeline waits {}, data-parallel {}, sharded {}, offload {}\n",
                   seconds(r.exposed.tensor), seconds(r.exposed.pipeline), seconds(r.exposed.data),
                   seconds(r.exposed.sharded), seconds(r.exposed.offload));
  s += fmt::format("peak memory over the timeline: {} on the fullest rank (headroom {})\n", gib(simulated_peak(r)),
                   gib(r.metrics.memory_capacity - simulated_peak(r)));
  s += comparison_text(analytic, r);
  return s;
}

nlohmann::json simulation_json(const Job& job, const sim::SimResult& r, const Estimate& analytic) {
  nlohmann::json j = estimate_json(job, r.metrics);
  j["estimator"] = {{"step_time_s", analytic.step_time},
                    {"difference_pct", sim::explain_difference(analytic, r).difference_pct}};
  j["timeline_peak_memory_bytes"] = simulated_peak(r);
  j["timeline_headroom_bytes"] = r.metrics.memory_capacity - simulated_peak(r);
  j["stage_utilisation"] = r.stage_utilisation;
  j["bubble_fraction"] = r.bubble_fraction;
  j["exposed_comm_s"] = {{"tensor", r.exposed.tensor}, {"pipeline", r.exposed.pipeline}, {"data", r.exposed.data},
                         {"sharded", r.exposed.sharded}, {"offload", r.exposed.offload}};
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& rr : r.ranks)
    ranks.push_back({{"rank", rr.rank}, {"stage", rr.stage}, {"end_s", rr.end_time}, {"compute_busy_s", rr.compute_busy},
                     {"peak_memory_bytes", rr.peak_memory}});
  j["ranks"] = ranks;
  j["symmetric"] = r.symmetric;
  j["activities"] = r.activities;
  return j;
}

namespace {
const Estimate& best_view(const search::Candidate& c) { return c.simulated ? c.simulation : c.estimate; }

nlohmann::json candidate_json(const search::Candidate& c) {
  const Estimate& v = best_view(c);
  const StepBreakdown& b = c.estimate.breakdown;
  return {{"configuration", search::describe(c.job)},
          {"pipeline_parallel_degree", c.job.parallel.pipeline_parallel_degree},
          {"tensor_parallel_degree", c.job.parallel.tensor_parallel_degree},
          {"data_parallel_degree", c.job.data_parallel_degree()},
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
          {"step_time_s", v.step_time},
          {"samples_per_s", v.samples_per_s},
          {"tflops_per_gpu", v.tflops_per_gpu},
          {"hw_tflops_per_gpu", v.hw_tflops_per_gpu},
          {"estimated_step_time_s", c.estimate.step_time},
          {"peak_memory_bytes", c.estimate.memory.total()},
          {"headroom_bytes", c.estimate.memory_capacity - c.estimate.memory.total()},
          {"breakdown_s", {{"compute", b.compute}, {"tensor_parallel", b.tensor_parallel_comm},
                           {"pipeline", b.pipeline_bubble + b.pipeline_drain_waits + b.pipeline_p2p},
                           {"data_parallel", b.data_parallel_exposed}, {"sharded", b.sharded_exposed},
                           {"offload", b.offload_exposed}}}};
}

// The search's budget through the one time-to-train rule (training_cost.hpp), at the
// given price per node-hour only (0: none).
TrainingCost budget_cost(const Job& job, double step_time, const TrainingBudget& budget) {
  TrainingCostOptions o;
  o.tokens = budget.tokens;
  o.on_demand_per_hour = budget.price_per_node_hour;
  return training_cost(job, step_time, o);
}

std::string duration(double s) {
  if (s >= 86400) return fmt::format("{:.1f} days", s / 86400);
  if (s >= 3600) return fmt::format("{:.1f} hours", s / 3600);
  return fmt::format("{:.1f} minutes", s / 60);
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
  std::string s = fmt::format("{:>3}  {:<52} {:>9} {:>9} {:>7} {:>8}  {:>7} {:>7} {:>7} {:>7} {:>7}\n", "#",
                              "configuration", "samples/s", "estimated", "TFLOPs", "headroom", "compute", "tensor",
                              "pipe", "data", "shard");
  const int n = std::min<int>(rows, static_cast<int>(groups.size()));
  for (int i = 0; i < n; ++i) {
    const search::Candidate& c = r.ranked[groups[i].first];
    const Estimate& v = best_view(c);
    const StepBreakdown& b = c.estimate.breakdown;
    const double step = c.estimate.step_time;
    auto pct = [&](double x) { return fmt::format("{:.0f}%", 100 * x / step); };
    s += fmt::format("{:>3}  {:<52} {:>9.2f} {:>9.2f} {:>7.1f} {:>8}  {:>7} {:>7} {:>7} {:>7} {:>7}{}\n", i + 1,
                     search::describe(c.job), v.samples_per_s, c.estimate.samples_per_s, v.tflops_per_gpu,
                     gib(c.estimate.memory_capacity - c.estimate.memory.total()), pct(b.compute),
                     pct(b.tensor_parallel_comm), pct(b.pipeline_bubble + b.pipeline_drain_waits + b.pipeline_p2p), pct(b.data_parallel_exposed),
                     pct(b.sharded_exposed), twins_note(r, groups[i]));
  }
  s += "  (samples/s and TFLOPs/GPU: simulated where simulated; the breakdown is the estimator's share of its step;\n"
       "   also: placement orders predicted exactly alike, the same configuration to the model)\n";
  return s + search::describe_legend_line();
}
}  // namespace

std::string search_text(const Job& base, const search::SearchReport& r, const TrainingBudget& budget, int rows) {
  std::string s = fmt::format("search: {} on {} x {} ({} GPUs), global batch {}\n", base.model.name, base.cluster.nodes,
                              base.cluster.instance.name, base.world_size(), base.training.global_batch);
  s += fmt::format("  enumerated {}, invalid {}, duplicate placements {}, estimated {} ({:.2f} s), pruned: {} do not "
                   "fit, {} dominated; re-partitioned {}; simulated {} ({:.2f} s)\n\n",
                   r.enumerated, r.invalid, r.duplicates, r.estimated, r.estimate_seconds, r.pruned_memory,
                   r.pruned_dominated, r.partitioned, r.simulated, r.simulate_seconds);
  const std::vector<search::TwinGroup> groups = search::group_twins(r.ranked);
  s += candidate_table(r, groups, rows);
  const search::Candidate& best = r.ranked.front();
  const Estimate& v = best_view(best);
  s += fmt::format("\nbest: {}{}\n  {:.2f} samples/s, {:.1f} model TFLOPs/GPU ({:.1f} hardware), MFU {:.1f}%, "
                   "step {:.3f} s{}\n",
                   search::describe(best.job), twins_note(r, groups.front()), v.samples_per_s, v.tflops_per_gpu,
                   v.hw_tflops_per_gpu, 100 * v.mfu, v.step_time, best.simulated ? " (simulated)" : " (estimated)");
  if (groups.size() > 1) {  // the runner-up: the best configuration that is not a twin of the winner
    const search::Candidate& runner_up = r.ranked[groups[1].first];
    s += fmt::format("  why it wins: {:.1f}% faster than the runner-up ({}); its step is {:.0f}% compute, the rest "
                     "exposed communication and bubble\n",
                     100 * (best_view(runner_up).step_time / v.step_time - 1), search::describe(runner_up.job),
                     100 * best.estimate.breakdown.compute / best.estimate.step_time);
  }
  if (r.has_tensor_across_nodes && r.has_pipeline_across_nodes) {
    const Estimate& t = best_view(r.best_tensor_across_nodes);
    const Estimate& p = best_view(r.best_pipeline_across_nodes);
    const bool both_simulated = r.best_tensor_across_nodes.simulated && r.best_pipeline_across_nodes.simulated;
    s += fmt::format("  model parallelism across nodes ({}): pipeline ({}) {:.2f} samples/s vs tensor ({}) {:.2f} "
                     "samples/s: pipeline is {:.2f}x {}\n",
                     both_simulated ? "simulated" : "estimated",
                     search::describe(r.best_pipeline_across_nodes.job), p.samples_per_s,
                     search::describe(r.best_tensor_across_nodes.job), t.samples_per_s,
                     p.samples_per_s / t.samples_per_s, p.samples_per_s >= t.samples_per_s ? "faster" : "slower");
  }
  if (budget.tokens > 0) {
    const TrainingCost c = budget_cost(base, v.step_time, budget);
    s += fmt::format("  {:.3g} tokens: {:.0f} steps, {} on {} nodes", budget.tokens, c.steps, duration(c.seconds),
                     base.cluster.nodes);
    if (budget.price_per_node_hour > 0)
      s += fmt::format(", cost {:.0f} at {:.2f} per node-hour", c.on_demand_usd, budget.price_per_node_hour);
    s += "\n";
  }
  return s;
}

nlohmann::json search_json(const Job& base, const search::SearchReport& r, const TrainingBudget& budget) {
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
                      {"pruned_dominated", r.pruned_dominated},
                      {"simulated", r.simulated},
                      {"partitioned", r.partitioned},
                      {"best", candidate_json(r.ranked.front())},
                      {"ranked", ranked}};
  if (r.has_tensor_across_nodes) j["best_tensor_across_nodes"] = candidate_json(r.best_tensor_across_nodes);
  if (r.has_pipeline_across_nodes) j["best_pipeline_across_nodes"] = candidate_json(r.best_pipeline_across_nodes);
  if (budget.tokens > 0) {
    const TrainingCost c = budget_cost(base, best_view(r.ranked.front()).step_time, budget);
    j["time_to_train_s"] = c.seconds;
    if (budget.price_per_node_hour > 0) j["cost"] = c.on_demand_usd;
  }
  return j;
}

std::string published_comparison_text(const std::vector<search::PublishedComparison>& rows) {
  std::string s = "published configuration vs the one the search finds (samples/s, predicted the same way)\n\n";
  int ok = 0;
  for (const auto& r : rows) {
    s += fmt::format("{} / {}\n", r.table, r.row);
    s += fmt::format("  published  {:>9.2f}  {}{}\n", r.published_samples_per_s, r.published_configuration,
                     r.published_fits ? "" : "  (predicted not to fit)");
    s += fmt::format("  found      {:>9.2f}  {}   {} ({:+.1f}%)\n", r.found_samples_per_s, r.found_configuration,
                     r.found_at_least_as_fast() ? "at least as fast" : "SLOWER",
                     100 * (r.found_samples_per_s / r.published_samples_per_s - 1));
    ok += r.found_at_least_as_fast() ? 1 : 0;
  }
  s += fmt::format("\n{} of {} rows: the configuration found is predicted at least as fast as the published one "
                   "({})\n",
                   ok, rows.size(), !rows.empty() && rows.front().simulated ? "simulator" : "estimator");
  return s;
}

nlohmann::json published_comparison_json(const std::vector<search::PublishedComparison>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"table", r.table}, {"row", r.row}, {"published_configuration", r.published_configuration},
                   {"published_samples_per_s", r.published_samples_per_s}, {"published_fits", r.published_fits},
                   {"found_configuration", r.found_configuration}, {"found_samples_per_s", r.found_samples_per_s},
                   {"simulated", r.simulated}, {"found_at_least_as_fast", r.found_at_least_as_fast()}});
  return {{"rows", out}};
}

std::string reproduce_text(const ReproduceResult& r) {
  std::string s = fmt::format("{:<20} {:<32} {:<18} {:>10} {:>10} {:>8}  {}\n", "table", "row", "metric",
                              "published", "predicted", "error", "direction");
  for (const RowResult& row : r.rows) {
    std::string dir;
    if (!row.before.empty()) dir = fmt::format("{} vs {}", row.direction_ok ? "ok   " : "WRONG", row.before);
    if (row.metric == Metric::speedup) dir = row.direction_ok ? "ok" : "WRONG";
    if (!row.fits) dir += " (predicted: does not fit)";
    s += fmt::format("{:<20} {:<32} {:<18} {:>10.2f} {:>10.2f} {:>+7.1f}%  {}\n", row.table, row.row,
                     to_string(row.metric), row.published, row.predicted, row.error_pct, dir);
  }
  s += fmt::format("\nMAPE over all {} rows: {:.1f}%   over TFLOPs rows: {:.1f}%   directions right: {}/{}\n",
                   r.rows.size(), r.mape_pct, r.mape_tflops_pct, r.pairs_right, r.pairs);
  return s;
}

nlohmann::json reproduce_json(const ReproduceResult& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const RowResult& row : r.rows) {
    rows.push_back({{"table", row.table},
                    {"row", row.row},
                    {"metric", to_string(row.metric)},
                    {"unit", unit_of(row.metric)},
                    {"published", row.published},
                    {"predicted", row.predicted},
                    {"error_pct", row.error_pct},
                    {"before", row.before},
                    {"direction_ok", row.direction_ok},
                    {"fits", row.fits},
                    {"known_gap", row.known_gap}});
  }
  return {{"rows", rows},
          {"mape_pct", r.mape_pct},
          {"mape_tflops_pct", r.mape_tflops_pct},
          {"directions", {{"pairs", r.pairs}, {"right", r.pairs_right}}}};
}

}  // namespace partune::cli
