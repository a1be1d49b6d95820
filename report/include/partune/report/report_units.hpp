#pragma once
// How the reports write quantities: bytes in GiB, seconds at a readable scale, long
// durations in minutes, hours or days. One definition for every report.
#include <fmt/format.h>

#include <limits>
#include <string>

#include "partune/costmodel/units.hpp"

namespace partune::report {

// "12.34 GiB".
inline std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / units::GiB); }

// "1.234 s", "12.345 ms", "56.7 us".
inline std::string seconds(double s) {
  if (s >= 1.0) return fmt::format("{:.3f} s", s);
  if (s >= 1e-3) return fmt::format("{:.3f} ms", s * 1e3);
  return fmt::format("{:.1f} us", s * 1e6);
}

// "3.2 days", "5.0 hours", "12.0 minutes"; "never" for an endless one.
inline std::string duration(double s) {
  if (s == std::numeric_limits<double>::infinity()) return "never";
  if (s >= 86400) return fmt::format("{:.1f} days", s / 86400);
  if (s >= 3600) return fmt::format("{:.1f} hours", s / 3600);
  return fmt::format("{:.1f} minutes", s / 60);
}

}  // namespace partune::report
