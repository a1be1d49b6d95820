#pragma once
// Starting build/partune-run from the main binary and reading its --json report, so that
// commands comparing with the backend (bench run, validate) never load LibTorch here.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace partune::launch {

// build/partune-run beside this executable.
std::string runner_path();

// `s` as one word for /bin/sh.
std::string shell_quoted(const std::string& s);

// A started shell command printing one JSON object on stdout; report() waits for it and
// parses that object. Its stderr goes to a temporary file, so that a rank's messages
// never mix with the JSON and a failure can quote them.
class BackendProcess {
 public:
  explicit BackendProcess(const std::string& command);
  ~BackendProcess();
  BackendProcess(const BackendProcess&) = delete;
  BackendProcess& operator=(const BackendProcess&) = delete;
  // Throws std::runtime_error naming the command, its exit status and the end of its
  // stderr when it fails or prints no JSON.
  nlohmann::json report();

 private:
  std::string command_, stderr_path_;
  FILE* pipe_ = nullptr;
};

}  // namespace partune::launch
