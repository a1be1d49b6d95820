// What-if sweeps (sweep.hpp).
#include "partune/search/sweep.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/scenario.hpp"

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

SweepPoint evaluate(const std::string& path, const SweepOptions& o, long index) {
  SweepPoint p;
  p.index = index;
  p.values = values_of(o.axes, index);
  std::vector<std::string> overrides = o.overrides;
  for (std::size_t a = 0; a < o.axes.size(); ++a) overrides.push_back(o.axes[a].key + "=" + p.values[a]);
  // A ScenarioError goes to the caller.
  p.job = o.job_yaml.empty() ? load_job(path, overrides) : parse_job(o.job_yaml, path, overrides);
  if (!o.search) {
    p.metrics = estimate(p.job);
    p.ok = true;
    return p;
  }
  SearchSpace space;
  for (const std::string& f : p.job.search_restrictions) restrict_space(space, f);
  const SearchReport r = run_search(p.job, space, o.search_options);
  if (r.ranked.empty()) {
    p.error = "no configuration fits";
    return p;
  }
  const Candidate& best = r.ranked.front();
  p.job = best.job;
  p.simulated = best.simulated;
  p.metrics = best.simulated ? best.simulation : best.estimate;
  p.ok = true;
  return p;
}

}  // namespace

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

std::vector<SweepPoint> run_sweep(const std::string& job_path, const SweepOptions& o) {
  const long total = sweep_size(o.axes);
  std::vector<long> mine;
  for (long i = o.offset; i < total; i += std::max(1L, o.stride)) mine.push_back(i);
  std::vector<SweepPoint> points(mine.size());
  std::vector<std::exception_ptr> first_error(mine.size());
  std::atomic<std::size_t> next{0};
  std::atomic<long> done{0};
  auto work_one = [&](std::size_t k) {
    try {
      points[k] = evaluate(job_path, o, mine[k]);
    } catch (const ScenarioError& e) {
      points[k].index = mine[k];
      points[k].values = values_of(o.axes, mine[k]);
      points[k].error = e.key().empty() ? e.what() : e.key() + ": " + e.reason();
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
  const int threads = o.search ? 1 : (o.threads > 0 ? o.threads : static_cast<int>(cores));
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
