// What-if sweeps (sweep.hpp).
#include "partune/search/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

#include "partune/costmodel/error.hpp"
#include "partune/search/knobs.hpp"

namespace partune::search {

namespace {

// Splits at commas outside brackets and braces (flow lists and mappings are one value).
std::vector<std::string> split_values(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char ch : text) {
    if (ch == '[' || ch == '{') ++depth;
    if (ch == ']' || ch == '}') --depth;
    if (ch == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

// The values of every axis for point `index` (the last axis fastest).
std::vector<std::string> values_of(const std::vector<SweepAxis>& axes, long index) {
  std::vector<std::string> out(axes.size());
  for (std::size_t a = axes.size(); a-- > 0;) {
    const long n = static_cast<long>(axes[a].values.size());
    out[a] = axes[a].values[static_cast<std::size_t>(index % n)];
    index /= n;
  }
  return out;
}

bool is_microbatches_key(const std::string& key) { return key == "microbatches" || key == "parallel.microbatches"; }

// The point as written, held to every job rule (it is estimated as it is).
Job load_point(const SweepJob& job, const std::vector<std::string>& overrides) {
  return job.load(overrides, JobRules::every);
}

// Whether a --set or axis key names the parallel layout: a key of parallel: or one of the
// search's knobs (its short name).
bool names_layout(const std::string& key) {
  if (key.rfind("parallel.", 0) == 0 || is_microbatches_key(key)) return true;
  return std::any_of(knobs().begin(), knobs().end(), [&](const Knob& k) { return key == k.key; });
}

// Why a sweep without --search searches its points: the job gives no layout to estimate.
std::string search_reason(const SweepJob& job, const SweepOptions& o) {
  if (o.search || job.file_gives_layout) return "";
  for (const SweepAxis& a : o.axes)
    if (names_layout(a.key)) return "";
  for (const std::string& set : o.overrides)
    if (names_layout(set.substr(0, set.find('=')))) return "";
  return "the job file gives no parallel: section";
}

// The error names one of the keys the micro-batch rules name (check_job's rules 9 and 12).
bool microbatch_violation(const ScenarioError& e) {
  return e.key() == "training.global_batch" || e.key() == "parallel.microbatches";
}

// Sequences of the global batch per data-parallel rank and accumulation step.
long batch_share(const Job& job) {
  return job.training.global_batch /
         (static_cast<long>(job.data_parallel_degree()) * job.training.gradient_accumulation);
}

// The micro-batches of the largest micro-batch size <= `size` that divides the job's
// batch share (with virtual_stages > 1: into a multiple of pp); 0 when none does.
int adapted_microbatches(const Job& job, int size) {
  const long share = batch_share(job);
  const int pp = job.parallel.pipeline_parallel_degree;
  for (long b = std::min<long>(size, share); b >= 1; --b) {
    if (share % b != 0) continue;
    const long m = share / b;
    if (job.parallel.virtual_stages > 1 && m % pp != 0) continue;
    return static_cast<int>(m);
  }
  return 0;
}

// Whether the point loads with one micro-batch (and one virtual stage): its batch splits
// over its data-parallel ranks, so some count of micro-batches would do.
bool splits_into_microbatches(const SweepJob& sj, std::vector<std::string> overrides) {
  overrides.insert(overrides.end(), {"microbatches=1", "virtual_stages=1"});
  try {
    load_point(sj, overrides);
    return true;
  } catch (const ScenarioError&) {
    return false;
  }
}

// The point's job where the job's own micro-batches do not divide its batch share: one
// sequence per micro-batch (which always divides it), for the policy to then choose.
Job load_with_unit_microbatch(const SweepJob& sj, std::vector<std::string> overrides) {
  std::vector<std::string> probe = overrides;
  probe.insert(probe.end(), {"microbatches=1", "virtual_stages=1"});
  const long share = batch_share(load_point(sj, probe));  // a batch no split divides throws here
  overrides.push_back("microbatches=" + std::to_string(share));
  try {
    return load_point(sj, overrides);
  } catch (const ScenarioError& e) {
    if (!microbatch_violation(e)) throw;
    throw ScenarioError(e.file(), "parallel.microbatches",
                        fmt::format("no number of micro-batches splits the {} sequences per data-parallel rank into "
                                    "a multiple of pipeline_parallel_degree (virtual_stages > 1 needs one)",
                                    share));
  }
}

// The point's job, its micro-batches set as `policy` says.
Job point_job(const SweepJob& sj, const MicrobatchPolicy& policy, const std::vector<std::string>& overrides) {
  Job job;
  try {
    job = load_point(sj, overrides);
  } catch (const ScenarioError& e) {
    if (!microbatch_violation(e)) throw;
    if (!policy.adapted && !splits_into_microbatches(sj, overrides)) throw;  // no count would do
    if (!policy.adapted)
      throw ScenarioError(e.file(), e.key(),
                          e.reason() + fmt::format(" (microbatches are fixed by {}, and the sweep keeps them; without "
                                                   "that it would choose them for each point)",
                                                   policy.fixed_by));
    job = load_with_unit_microbatch(sj, overrides);
  }
  if (!policy.adapted) return job;
  if (const int m = adapted_microbatches(job, policy.microbatch_size); m > 0) job.parallel.microbatches = m;
  if (const JobViolation v = check_job(job)) throw ScenarioError(sj.origin, v.key, v.reason);
  return job;
}

// A point searched: its job's layout is where the search starts (JobRules::settings), its
// best configuration the point.
SweepPoint searched_point(const SweepJob& sj, const SweepOptions& o, SweepPoint p,
                          const std::vector<std::string>& overrides) {
  p.job = sj.load(overrides, JobRules::settings);  // a ScenarioError goes to the caller
  SearchSpace space;
  for (const std::string& f : p.job.search_restrictions) restrict_space(space, f);
  opt_in_from_job(space, p.job);
  const SearchReport r = run_search(p.job, space, o.search_options);
  if (r.ranked.empty()) {
    p.status = PointStatus::does_not_fit;
    p.reason = fmt::format("no configuration fits ({} enumerated, {} over memory)", r.enumerated, r.pruned_memory);
    return p;
  }
  const Candidate& best = r.ranked.front();
  p.job = best.job;
  p.configuration = best.configuration;
  p.simulated = best.simulated;
  p.metrics = best.simulated ? best.simulation : best.estimate;
  p.has_metrics = true;
  p.status = PointStatus::fits;
  return p;
}

SweepPoint evaluate(const SweepJob& sj, const SweepOptions& o, const MicrobatchPolicy& policy, long index) {
  SweepPoint p;
  p.index = index;
  p.values = values_of(o.axes, index);
  std::vector<std::string> overrides = o.overrides;
  for (std::size_t a = 0; a < o.axes.size(); ++a) overrides.push_back(o.axes[a].key + "=" + p.values[a]);
  if (policy.searched) return searched_point(sj, o, std::move(p), overrides);
  p.job = point_job(sj, policy, overrides);  // a ScenarioError goes to the caller
  p.configuration = describe(p.job);
  p.metrics = estimate(p.job);
  p.has_metrics = true;
  p.status = p.metrics.fits ? PointStatus::fits : PointStatus::does_not_fit;
  p.reason = p.metrics.not_fit_reason;
  return p;
}


}  // namespace

const char* to_string(PointStatus s) {
  switch (s) {
    case PointStatus::fits: return "fits";
    case PointStatus::does_not_fit: return "does not fit";
    case PointStatus::invalid: return "invalid";
  }
  return "invalid";
}

MicrobatchPolicy microbatch_policy(const SweepJob& job, const SweepOptions& o) {
  MicrobatchPolicy policy;
  policy.microbatches = job.base.parallel.microbatches;
  policy.microbatch_size = std::max(1, job.base.microbatch_size());  // 0 where the base's layout does not split the batch
  for (const SweepAxis& a : o.axes)
    if (is_microbatches_key(a.key)) policy.fixed_by = "the axis " + a.key;
  for (auto it = o.overrides.rbegin(); it != o.overrides.rend() && policy.fixed_by.empty(); ++it)
    if (is_microbatches_key(it->substr(0, it->find('=')))) policy.fixed_by = "--set " + *it;
  if (policy.fixed_by.empty() && job.file_sets_microbatches)
    policy.fixed_by = "the job file's parallel.microbatches";
  policy.searched_because = search_reason(job, o);
  policy.searched = o.search || !policy.searched_because.empty();
  // A search chooses its own: the job's only have to let each point load.
  policy.adapted = policy.searched || policy.fixed_by.empty();
  return policy;
}

SweepAxis parse_axis(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw std::invalid_argument("'" + text + "': expected KEY=V1,V2,...");
  SweepAxis a;
  a.key = text.substr(0, eq);
  a.values = split_values(text.substr(eq + 1));
  for (const std::string& v : a.values)
    if (v.empty()) throw std::invalid_argument("'" + text + "': an empty value");
  return a;
}

std::vector<SweepAxis> sweep_axes(const std::vector<std::string>& from_file, const std::vector<std::string>& vary) {
  std::vector<SweepAxis> out;
  for (const auto* list : {&from_file, &vary})
    for (const std::string& text : *list) {
      SweepAxis a = parse_axis(text);
      auto same = std::find_if(out.begin(), out.end(), [&](const SweepAxis& b) { return b.key == a.key; });
      if (same != out.end()) *same = std::move(a);
      else out.push_back(std::move(a));
    }
  return out;
}

long sweep_size(const std::vector<SweepAxis>& axes) {
  long n = 1;
  for (const SweepAxis& a : axes) n *= static_cast<long>(a.values.size());
  return n;
}

std::vector<SweepAxis> job_sweep_axes(const SweepJob& job, const std::vector<std::string>& vary,
                                      const std::string& vary_key) {
  try {
    return sweep_axes(job.base.sweep_axes, vary);
  } catch (const std::invalid_argument& e) {
    throw ScenarioError(job.origin, vary_key, e.what());
  }
}

std::vector<SweepPoint> run_sweep(const SweepJob& job, const SweepOptions& o) {
  const long total = sweep_size(o.axes);
  std::vector<long> mine;
  for (long i = o.offset; i < total; i += std::max(1L, o.stride)) mine.push_back(i);
  std::vector<SweepPoint> points(mine.size());
  std::vector<std::exception_ptr> first_error(mine.size());
  std::atomic<std::size_t> next{0};
  std::atomic<long> done{0};
  const MicrobatchPolicy policy = microbatch_policy(job, o);
  auto work_one = [&](std::size_t k) {
    try {
      points[k] = evaluate(job, o, policy, mine[k]);
    } catch (const ScenarioError& e) {
      points[k].index = mine[k];
      points[k].values = values_of(o.axes, mine[k]);
      points[k].status = PointStatus::invalid;
      points[k].reason = e.key().empty() ? e.what() : e.key() + ": " + e.reason();
      first_error[k] = std::current_exception();
    }
    ++done;
  };
  auto work = [&] {
    for (std::size_t k; (k = next++) < mine.size();) work_one(k);
  };
  // No point loaded at all: the input is wrong, not the what-if.
  auto finish = [&] {
    // (A share of the points, o.stride > 1, cannot tell: its caller judges them all.)
    const bool none_loaded =
        std::all_of(first_error.begin(), first_error.end(), [](const auto& e) { return e != nullptr; });
    if (none_loaded && !first_error.empty() && o.stride <= 1) std::rethrow_exception(first_error.front());
    return points;
  };
  // The search uses every core for its simulations, which fork: its points go one at a
  // time on the calling thread (a process that forks must run one thread).
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const int threads = policy.searched ? 1 : (o.threads > 0 ? o.threads : static_cast<int>(cores));
  if (threads == 1 || mine.size() <= 1) {
    for (std::size_t k = 0; k < mine.size(); ++k) {
      if (o.progress) o.progress(static_cast<long>(k), static_cast<long>(mine.size()));
      work_one(k);
    }
    if (o.progress) o.progress(static_cast<long>(mine.size()), static_cast<long>(mine.size()));
    return finish();
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < std::min<int>(threads, static_cast<int>(mine.size())); ++t) pool.emplace_back(work);
  for (long shown = -1; o.progress && done.load() < static_cast<long>(mine.size());) {
    if (done.load() != shown) o.progress(shown = done.load(), static_cast<long>(mine.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (std::thread& t : pool) t.join();
  if (o.progress) o.progress(static_cast<long>(mine.size()), static_cast<long>(mine.size()));
  return finish();
}

}  // namespace partune::search
