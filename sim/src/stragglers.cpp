// Slow GPUs (simulator.hpp's Slowdown): the specs of `simulate --slow` and each rank's
// kernel-time factor.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "partune/sim/simulator.hpp"

namespace partune::sim {

namespace {

double number(const std::string& text, const std::string& spec) {
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(x))
    throw std::invalid_argument(fmt::format("--slow {}: '{}' is not a number", spec, text));
  return x;
}

// A standard normal draw from the rank alone (SplitMix64, then Box-Muller): the same job
// gives the same draw on every machine.
double normal_of(std::uint64_t rank) {
  auto next = [&rank] {
    std::uint64_t z = (rank += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<double>((z ^ (z >> 31)) >> 11) / 9007199254740992.0;  // [0, 1)
  };
  const double u1 = next(), u2 = next();
  return std::sqrt(-2.0 * std::log(1.0 - u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

Slowdown parse_slowdown(const std::string& spec) {
  const std::size_t eq = spec.find('=');
  if (eq == std::string::npos)
    throw std::invalid_argument(fmt::format("--slow {}: expected node=N:FACTOR, rank=N:FACTOR or jitter=SD", spec));
  const std::string scope = spec.substr(0, eq), value = spec.substr(eq + 1);
  Slowdown s;
  if (scope == "jitter") {
    s.scope = Slowdown::Scope::jitter;
    s.factor = number(value, spec);
    if (s.factor < 0 || s.factor > 1)
      throw std::invalid_argument(fmt::format("--slow {}: the jitter's standard deviation must be in [0, 1]", spec));
    return s;
  }
  if (scope != "node" && scope != "rank")
    throw std::invalid_argument(fmt::format("--slow {}: '{}' is not node, rank or jitter", spec, scope));
  s.scope = scope == "node" ? Slowdown::Scope::node : Slowdown::Scope::rank;
  const std::size_t colon = value.find(':');
  if (colon == std::string::npos)
    throw std::invalid_argument(fmt::format("--slow {}: expected {}=N:FACTOR", spec, scope));
  const double index = number(value.substr(0, colon), spec);
  if (index < 0 || index != std::floor(index))
    throw std::invalid_argument(fmt::format("--slow {}: the {} must be a whole number >= 0", spec, scope));
  s.index = static_cast<int>(index);
  s.factor = number(value.substr(colon + 1), spec);
  if (s.factor < 1 || s.factor > 100)
    throw std::invalid_argument(fmt::format("--slow {}: the factor must be in [1, 100] (kernels that long)", spec));
  return s;
}

std::vector<double> slowdown_factors(const Job& job, const std::vector<Slowdown>& slowdowns) {
  const int world = job.world_size(), per_node = job.cluster.instance.gpus_per_node;
  std::vector<double> factors(static_cast<std::size_t>(world), 1.0);
  for (const Slowdown& s : slowdowns) {
    if (s.scope == Slowdown::Scope::jitter) {
      for (int r = 0; r < world; ++r) factors[r] *= 1.0 + std::abs(normal_of(static_cast<std::uint64_t>(r))) * s.factor;
      continue;
    }
    const bool node = s.scope == Slowdown::Scope::node;
    const int count = node ? job.cluster.nodes : world;
    if (s.index >= count)
      throw std::invalid_argument(fmt::format("--slow {}={}:{}: the job has {} {}s (0 to {})", node ? "node" : "rank",
                                              s.index, s.factor, count, node ? "node" : "rank", count - 1));
    for (int r = 0; r < world; ++r)
      if (node ? r / per_node == s.index : r == s.index) factors[r] *= s.factor;
  }
  return factors;
}

}  // namespace partune::sim
