#pragma once
// Text both instance-type writers share (profile_file.cpp for the CPU, gpu_profile_file.cpp
// for a GPU), and the calibration header's date and host (calibrate.cpp, gpu_calibrate.cpp).
#include <unistd.h>

#include <ctime>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "partune/costmodel/calibration_fit.hpp"

namespace partune::kernels::detail {

// A YAML double-quoted scalar.
inline std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// "residual rms 4.6% max 13.2% over 10 samples" (a key's comment).
inline std::string residual_text(const calibration::Residual& r) {
  return fmt::format("residual rms {:.1f}% max {:.1f}% over {} samples", 100 * r.rms_relative, 100 * r.max_relative,
                     r.samples);
}

// The same as a flow mapping's entries (the calibration: section).
inline std::string residual_map(const calibration::Residual& r) {
  return fmt::format("rms_relative_error: {:.4f}, max_relative_error: {:.4f}, samples: {}", r.rms_relative,
                     r.max_relative, r.samples);
}

// Now, ISO 8601 in UTC.
inline std::string utc_now() {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return date;
}

// The calibration: section's `notes:` list (what was not measured or fitted, and why).
inline void write_notes(std::ostringstream& y, const std::vector<std::string>& notes) {
  y << "  notes:";
  if (notes.empty()) y << " []";
  y << "\n";
  for (const auto& n : notes) y << "    - " << quoted(n) << "\n";
}

inline std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace partune::kernels::detail
