#pragma once
// The files and the terminal of `partune calibrate`: the profile written atomically (or
// its measurements kept aside when a fit is unusable) and a progress bar while the
// benchmarks run.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "partune/costmodel/atomic_file.hpp"
#include "partune/costmodel/hardware.hpp"
#include "progress.hpp"

namespace partune::cli {

// "partune: error: MESSAGE" on standard error, then Exit{code}.
[[noreturn]] void fail_calibration(const std::string& message, int code);

// The output is written to a temporary file beside it and renamed into place, so a failed
// or interrupted calibration never leaves a half-written profile. The temporary file is
// created before any benchmark runs: a bad path fails at once (exit 2).
std::unique_ptr<AtomicFile> open_output(const std::string& path);

// Writes the profile, unless a fit is unusable: then its measurements are kept beside the
// target (not a .yaml: never taken for an instance type) and the command fails. The file
// must be one the loader accepts (strict keys, ranges) before it replaces anything.
InstanceType write_profile(AtomicFile& output, const std::string& out, const std::string& yaml,
                           const std::vector<std::string>& unusable);

// calibrate --records: the recorded runs' measurements (their calibrate.json) fitted again
// by today's rules and written as `out`; refused (exit 2) before anything is written when a
// record does not read.
void calibrate_records(const std::vector<std::string>& records, const std::string& out, bool json,
                       const std::string& command);

// A progress bar on standard error when it is a terminal (silent into a file or a pipe);
// `run` gets the callback, or an empty one.
template <class Run>
auto with_progress(Run run) {
  const bool bar = ::isatty(STDERR_FILENO) != 0;
  std::function<void(int, int, const char*)> progress;
  if (bar) progress = [](int done, int total, const char* what) { progress_bar(done, total, what); };
  try {
    auto result = run(progress);
    if (bar) std::fprintf(stderr, "\r\033[K");
    return result;
  } catch (...) {
    if (bar) std::fprintf(stderr, "\n");
    throw;
  }
}

}  // namespace partune::cli
