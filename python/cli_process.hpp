#pragma once
// Running the `partune` binary from the Python module. The simulator forks a child per
// simulation, which a multi-threaded process (a Jupyter kernel, a Python program with
// threads) must not do: the module's simulate and search run in the binary's own process
// instead, started with posix_spawn (no fork of the interpreter) and read back as JSON.
#include <string>
#include <vector>

namespace partune::python {

struct CliResult {
  int status = 0;         // exit status (2: bad input, the message on stderr)
  std::string out, err;   // standard output and error
};
// Runs `partune` (the binary built beside the module, PARTUNE_CLI overrides) with `args`.
CliResult run_cli(const std::vector<std::string>& args);

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

}  // namespace partune::python
