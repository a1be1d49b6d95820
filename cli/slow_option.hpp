#pragma once
// --slow SPEC (simulate and search): a slow-GPU spec checked against the job; a bad spec,
// or a node or rank the job does not have, is a usage error (exit 2) naming it.
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>

#include "partune/sim/simulator.hpp"

namespace partune::cli {

inline sim::Slowdown slowdown_option(const Job& job, const std::string& spec) {
  try {
    const sim::Slowdown s = sim::parse_slowdown(spec);
    sim::slowdown_factors(job, {s});
    return s;
  } catch (const std::invalid_argument& e) {
    throw CLI::ValidationError(e.what());
  }
}

}  // namespace partune::cli
