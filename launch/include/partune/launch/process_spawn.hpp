#pragma once
// Running a program with posix_spawn (no fork of the caller) and reading its output. The
// simulator forks a child per simulation, which a multi-threaded process must not do: the
// Python module (a Jupyter kernel has threads) runs simulations in the partune binary's
// own process, and partune search under MPI (whose runtime starts threads) in a fresh
// partune process each.
#include <string>
#include <vector>

namespace partune::launch {

struct CliResult {
  int status = 0;         // exit status (2: bad input, the message on stderr)
  std::string out, err;   // standard output and error
};
// Runs the program at `path` with `args` and waits for it.
CliResult run_program(const std::string& path, const std::vector<std::string>& args);

// A file removed when this goes out of scope (a dict's job written for the binary).
class TemporaryFile {
 public:
  TemporaryFile(const std::string& suffix, const std::string& content);
  ~TemporaryFile();
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace partune::launch
