#pragma once
// Internal units are SI throughout costmodel/: bytes, seconds, FLOP, FLOP/s, bytes/s.
// Scenario files carry the unit in the key (bw_GBps, latency_us, hbm_GiB) and are
// converted once, at load time.

namespace partune::units {

inline constexpr double kilo = 1e3;
inline constexpr double mega = 1e6;
inline constexpr double giga = 1e9;
inline constexpr double tera = 1e12;
inline constexpr double GiB = 1024.0 * 1024.0 * 1024.0;
inline constexpr double MiB = 1024.0 * 1024.0;
inline constexpr double us = 1e-6;
inline constexpr double ms = 1e-3;

// Network line rates are quoted in bits per second.
inline constexpr double gbit_to_bytes(double gbps) { return gbps * giga / 8.0; }

}  // namespace partune::units
