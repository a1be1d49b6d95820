#pragma once
// The ranges of `partune run`'s numeric options, as CLI11 validators: a value out of range,
// not finite or not a number is refused before anything runs, with one line naming the
// option and the allowed range ("--lr: must be a finite number above 0 and at most 100
// (got nan)"), exit status 2 (run_app).
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace partune::cli {

// A number in [low, high] (above `low` when !low_included); `range` is how the message
// states it.
inline CLI::Validator number_in(double low, double high, bool low_included, const std::string& range) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(text.c_str(), &end);
        const bool number = !text.empty() && end != text.c_str() && *end == '\0';
        if (number && std::isfinite(v) && (low_included ? v >= low : v > low) && v <= high) return {};
        return fmt::format("must be {} (got {})", range, text);
      },
      range);
}

// An integer from `low` to `high`.
inline CLI::Validator integer_in(long long low, long long high) {
  const std::string range = fmt::format("an integer from {} to {}", low, high);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (!text.empty() && end != text.c_str() && *end == '\0' && errno != ERANGE && v >= low && v <= high) return {};
        return fmt::format("must be {} (got {})", range, text);
      },
      range);
}

// A seed: an unsigned 64-bit integer.
inline CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        std::strtoull(text.c_str(), &end, 10);
        if (!text.empty() && text.find_first_not_of("0123456789") == std::string::npos && errno != ERANGE) return {};
        return fmt::format("must be an integer from 0 to 18446744073709551615 (got {})", text);
      },
      "0 to 2^64-1");
}

}  // namespace partune::cli
