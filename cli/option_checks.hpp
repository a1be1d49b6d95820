#pragma once
// Range checks for numeric options, with the allowed range in the message. CLI11's own
// PositiveNumber and Range let NaN through (every comparison with NaN is false) and
// accept infinity; these do not.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace partune::cli {

// A finite number in [lo, hi] (lo excluded when `lo_open`), e.g. a learning rate.
inline CLI::Validator number_in(double lo, double hi, bool lo_open = false) {
  const std::string range = fmt::format("a finite number {} {:g} and <= {:g}", lo_open ? ">" : ">=", lo, hi);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        const bool ok = end != text.c_str() && *end == '\0' && errno != ERANGE && std::isfinite(v) &&
                        (lo_open ? v > lo : v >= lo) && v <= hi;
        return ok ? std::string() : fmt::format("'{}' is not {}", text, range);
      },
      range);
}

// A whole number in [lo, hi], e.g. a thread count.
inline CLI::Validator count_in(long long lo, long long hi) {
  const std::string range = fmt::format("a whole number from {} to {}", lo, hi);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        const bool ok = end != text.c_str() && *end == '\0' && errno != ERANGE && v >= lo && v <= hi;
        return ok ? std::string() : fmt::format("'{}' is not {}", text, range);
      },
      range);
}

}  // namespace partune::cli
