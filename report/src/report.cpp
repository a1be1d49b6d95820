#include "partune/report/report.hpp"

#include "partune/search/fit_advice.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "partune/report/estimate_fields.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/sim/explain.hpp"
#include "partune/report/report_units.hpp"
#include "partune/search/fit_advice.hpp"

namespace partune::report {

namespace {

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

std::string share(double part, double whole) {
  return whole > 0 ? fmt::format("{:5.1f}%", 100.0 * part / whole) : "";
}

// The step breakdown's rows (estimate_fields.hpp), each with its share of the step.
std::string breakdown_text(const StepMetrics& e) {
  std::string s = "\nstep time breakdown (critical stage)          time   share\n";
  for (const StepField& f : step_fields()) {
    const double t = e.breakdown.*f.value;
    if (!f.label || (!f.row_when_zero && !(t > 0))) continue;
    const double note = f.note ? e.breakdown.*f.note : 0;
    const std::string extra = note > 0 ? fmt::format(fmt::runtime(f.note_format), seconds(note)) : "";
    s += fmt::format("  {:<36} {:>12} {}{}\n", f.label, seconds(t), share(t, e.step_time), extra);
  }
  return s + "  (the rows add up to the step time; 'of X total': that kind's whole busy time, the rest hidden)\n";
}

// The memory section's rows (estimate_fields.hpp) and whether it fits.
std::string memory_text(const StepMetrics& e) {
  const MemoryBreakdown& m = e.memory;
  std::string s = fmt::format("\nmemory per GPU (largest: pipeline stage {})\n", m.stage);
  for (const MemoryField& f : memory_fields()) {
    const double bytes = f.value(m);
    switch (f.row) {
      case MemoryRow::part:
      case MemoryRow::host:
        if (bytes > 0) s += fmt::format("  {:<36} {:>12}\n", f.label, gib(bytes));
        break;
      case MemoryRow::overlap:
        if (bytes > 0) s += fmt::format("  {:<36} {:>12}\n", f.label, "-" + gib(bytes));
        break;
      case MemoryRow::total:
        s += fmt::format("  {:<36} {:>12} of {}\n", f.label, gib(bytes), gib(e.memory_capacity));
        break;
    }
  }
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
  const std::string context = pc.context_parallel_degree > 1 ? fmt::format(" x context {} ({})",
                                                                             pc.context_parallel_degree,
                                                                             to_string(pc.cp_comm_type))
                                                               : std::string();
  s += fmt::format("  parallel: pipeline {} x tensor {}{} x data {} (sharded {}{}), placement {}\n",
                   pc.pipeline_parallel_degree, pc.tensor_parallel_degree, context, job.data_parallel_degree(),
                   pc.sharded_data_parallel_degree, experts, pc.placement_strategy.smp_name());
  s += fmt::format("  batch: {} sequences of {} tokens = {} micro-batches of {} x {} accumulation steps "
                   "per data-parallel rank\n",
                   job.training.global_batch, job.model.seq_len, pc.microbatches, job.microbatch_size(),
                   job.training.gradient_accumulation);
  s += fmt::format("  schedule {}{}, checkpointing {}, offload {}, optimizer sharding {}, "
                   "FlashAttention {}, sharded collective {}, {} {}\n",
                   pc.pipeline == PipelineSchedule::gpipe        ? "GPipe"
                   : pc.pipeline == PipelineSchedule::zb_h1     ? "ZB-H1"
                   : pc.pipeline == PipelineSchedule::zbv       ? "ZBV"
                   : pc.pipeline == PipelineSchedule::dualpipev ? "DualPipeV"
                                                                : "1F1B",
                   pc.virtual_stages > 1 && !v_shaped(pc.pipeline) ? fmt::format(" ({} virtual stages)", pc.virtual_stages)
                                                                    : "",
                   to_string(pc.activation_checkpointing), offload_text(pc),
                   !pc.shard_optimizer_state ? "off" : pc.shard_gradients ? "on, gradients too (ZeRO-2)" : "on",
                   pc.flash_attention ? "on" : "off",
                   to_string(pc.sharded_collective), to_string(job.training.precision),
                   to_string(job.training.optimizer));
  return s;
}

namespace {
// For a job that does not fit: the changes that make it fit, each checked by estimating
// the job with it (search/fit_advice.hpp), written where they go.
std::string fit_changes_text(const Job& job, const StepMetrics& e) {
  if (e.fits) return "";
  bool together = false;
  const std::vector<search::FitChange> changes = search::changes_to_fit(job, &together);
  if (changes.empty()) return "no change tried makes it fit, alone or two together (sharding, checkpointing, FlashAttention, offload, up to "
                            "16x the nodes)\n";
  std::string s = together ? "fits with both (estimated):\n" : "fits with (each alone, estimated):\n";
  for (const search::FitChange& c : changes)
    s += fmt::format("  {} in the job file (or --set {}): {:.1f} GiB, {} a step\n", c.keys, c.set,
                     c.peak_bytes / units::GiB, seconds(c.step_time));
  return s;
}
}  // namespace

std::string estimate_text(const Job& job, const StepMetrics& e) {
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
  return s + breakdown_text(e) + memory_text(e) + fit_changes_text(job, e);
}

nlohmann::json estimate_json(const Job& job, const StepMetrics& e) {
  nlohmann::json j;
  j["job"] = job.name;
  j["model"] = job.model.name;
  j["parameters"] = total_parameters(job.model);  // the whole model's, every parameter once
  j["active_parameters"] = active_parameters(job.model);  // what one token runs through
  j["active_compute_parameters"] = active_compute_parameters(job.model);  // of those, what it multiplies
  j["gpus"] = job.world_size();
  for (const EstimateField& f : estimate_fields()) j[f.key] = f.value(e);
  j["fits"] = e.fits;
  j["not_fit_reason"] = e.not_fit_reason;
  if (!e.fits) {  // what makes it fit, each checked by estimating the job with it
    bool together = false;
    nlohmann::json& changes = j["fit_changes"] = nlohmann::json::array();
    for (const search::FitChange& c : search::changes_to_fit(job, &together))
      changes.push_back({{"job_file", c.keys}, {"set", c.set}, {"together", together},
                         {"peak_memory_bytes", c.peak_bytes}, {"step_time_s", c.step_time}});
  }
  nlohmann::json& breakdown = j["breakdown"] = {{"exposed_s", nlohmann::json::object()},
                                                 {"totals_s", nlohmann::json::object()},
                                                 {"sum_rule", step_sum_rule()}};
  for (const StepField& f : step_fields()) breakdown[f.label ? "exposed_s" : "totals_s"][f.key] = e.breakdown.*f.value;
  nlohmann::json& memory = j["memory"] = {{"stage", e.memory.stage}};
  for (const MemoryField& f : memory_fields())
    if (f.key) memory[f.key] = f.value(e.memory);
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
  // Two bubbles: the breakdown's "pipeline bubble" is the critical rank's idle time; this
  // is the mean over every simulated rank (simulate --help).
  s += fmt::format("bubble fraction      {:.1f}%  (mean over ranks of the step spent waiting on pipeline neighbours; "
                   "the breakdown's pipeline bubble is the critical rank's: {:.1f}%)\n",
                   100 * r.bubble_fraction,
                   r.metrics.step_time > 0 ? 100 * r.metrics.breakdown.pipeline_bubble / r.metrics.step_time : 0.0);
  s += "stage utilisation   ";
  for (double u : r.stage_utilisation) s += fmt::format(" {:.0f}%", 100 * u);
  s += "\nexposed communication on the critical rank (the one that finishes last)\n";
  const double tensor_only = std::max(0.0, r.exposed.tensor - r.exposed.context - r.exposed.expert);
  s += fmt::format("  tensor-parallel {}{}{}, pipeline waits {}, data-parallel {}, sharded {}, offload {}\n",
                   seconds(tensor_only),
                   r.exposed.context > 0 ? ", context-parallel " + seconds(r.exposed.context) : "",
                   r.exposed.expert > 0 ? ", expert all-to-all " + seconds(r.exposed.expert) : "",
                   seconds(r.exposed.pipeline), seconds(r.exposed.data), seconds(r.exposed.sharded),
                   seconds(r.exposed.offload));
  s += fmt::format("peak memory over the timeline: {} on the fullest rank (headroom {})\n", gib(simulated_peak(r)),
                   gib(r.metrics.memory_capacity - simulated_peak(r)));
  s += comparison_text(analytic, r);
  return s;
}

const char* simulation_terms() {
  return "Terms of the report:\n"
         "  pipeline bubble    (step time breakdown) the critical rank's time, in the step, that is neither\n"
         "                     compute nor an exposed collective: waiting on pipeline neighbours (JSON:\n"
         "                     breakdown.exposed_s.pipeline_bubble, seconds)\n"
         "  bubble fraction    the same waiting, as a share of the step, averaged over every simulated rank\n"
         "                     (JSON: bubble_fraction); below the critical rank's when other ranks wait less\n"
         "  exposed            time a rank is blocked on (or slowed by) a collective of that kind; the\n"
         "                     breakdown's rows add up to the step time, 'of X total' is the kind's whole\n"
         "                     busy time, partly hidden under compute\n"
         "  tensor-parallel, context-parallel, expert all-to-all: the layers' collectives over the tensor,\n"
         "                     context and expert groups, each under its own name (JSON: exposed_comm_s)\n";
}

nlohmann::json simulation_json(const Job& job, const sim::SimResult& r, const Estimate& analytic) {
  nlohmann::json j = estimate_json(job, r.metrics);
  j["estimator"] = {{"step_time_s", analytic.step_time},
                    {"difference_pct", sim::explain_difference(analytic, r).difference_pct}};
  j["timeline_peak_memory_bytes"] = simulated_peak(r);
  j["timeline_headroom_bytes"] = r.metrics.memory_capacity - simulated_peak(r);
  j["stage_utilisation"] = r.stage_utilisation;
  j["bubble_fraction"] = r.bubble_fraction;
  j["exposed_comm_s"] = {{"tensor", std::max(0.0, r.exposed.tensor - r.exposed.context - r.exposed.expert)},
                         {"context", r.exposed.context}, {"expert", r.exposed.expert},
                         {"pipeline", r.exposed.pipeline}, {"data", r.exposed.data},
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

std::string published_comparison_text(const std::vector<search::PublishedComparison>& rows) {
  std::string s = "published configuration vs the one the search finds (samples/s, predicted the same way)\n\n";
  int ok = 0, comparable = 0;
  for (const auto& r : rows) {
    s += fmt::format("{} / {}\n", r.table, r.row);
    s += fmt::format("  published  {:>9.2f}  {}{}\n", r.published_samples_per_s, r.published_configuration,
                     r.published_fits ? "" : "  (predicted not to fit)");
    s += fmt::format("  found      {:>9.2f}  {}   {} ({:+.1f}%)\n", r.found_samples_per_s, r.found_configuration,
                     !r.comparable()                ? "not compared: the published one does not fit"
                     : r.found_at_least_as_fast() ? "at least as fast"
                                                  : "SLOWER",
                     100 * (r.found_samples_per_s / r.published_samples_per_s - 1));
    ok += r.comparable() && r.found_at_least_as_fast() ? 1 : 0;
    comparable += r.comparable() ? 1 : 0;
  }
  s += fmt::format("\n{} of {} rows whose published configuration fits: the configuration found is predicted at "
                   "least as fast as the published one ({}){}\n",
                   ok, comparable, !rows.empty() && rows.front().simulated ? "simulator" : "estimator",
                   comparable < static_cast<int>(rows.size())
                       ? fmt::format("; {} more rows' published configuration is predicted not to fit",
                                     static_cast<int>(rows.size()) - comparable)
                       : std::string());
  return s;
}

nlohmann::json published_comparison_json(const std::vector<search::PublishedComparison>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"table", r.table}, {"row", r.row}, {"published_configuration", r.published_configuration},
                   {"published_samples_per_s", r.published_samples_per_s}, {"published_fits", r.published_fits},
                   {"found_configuration", r.found_configuration}, {"found_samples_per_s", r.found_samples_per_s},
                   {"simulated", r.simulated}, {"found_at_least_as_fast", r.found_at_least_as_fast()}, {"comparable", r.comparable()}});
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
                    {"known_gap", row.known_gap},
                    {"gpu", row.gpu},
                    {"parallel_kind", row.parallel_kind}});
  }
  return {{"rows", rows},
          {"mape_pct", r.mape_pct},
          {"mape_tflops_pct", r.mape_tflops_pct},
          {"directions", {{"pairs", r.pairs}, {"right", r.pairs_right}}}};
}

}  // namespace partune::report
