#include "partune/launch/backend_process.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

namespace partune::launch {

std::string runner_path() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = ".";
  if (n > 0) {
    self[n] = '\0';
    dir = self;
    dir = dir.substr(0, dir.find_last_of('/'));
  }
  return dir + "/partune-run";
}

std::string shell_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

BackendProcess::BackendProcess(const std::string& command) : command_(command) {
  char path[] = "/tmp/partune-stderr-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw std::runtime_error("cannot create a temporary file for: " + command);
  ::close(fd);
  stderr_path_ = path;
  pipe_ = ::popen((command + " 2>" + shell_quoted(stderr_path_)).c_str(), "r");
  if (!pipe_) {
    std::remove(stderr_path_.c_str());
    throw std::runtime_error("cannot start: " + command);
  }
}

BackendProcess::~BackendProcess() {
  if (pipe_) ::pclose(pipe_);
  std::remove(stderr_path_.c_str());
}

nlohmann::json BackendProcess::report() {
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe_)) out.append(buf.data(), n);
  const int status = ::pclose(pipe_);
  pipe_ = nullptr;
  std::stringstream err;
  err << std::ifstream(stderr_path_).rdbuf();
  std::string tail = err.str();
  if (tail.size() > 2000) tail = "..." + tail.substr(tail.size() - 2000);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  const bool exited = WIFEXITED(status);
  if (!exited || WEXITSTATUS(status) != 0)
    throw std::runtime_error(fmt::format("the backend run failed ({} {}): {}{}{}",
                                         exited ? "exit status" : "signal",
                                         exited ? WEXITSTATUS(status) : WTERMSIG(status), command_,
                                         tail.empty() ? "" : "\n", tail));
  try {
    return nlohmann::json::parse(out);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(fmt::format("the backend run printed no JSON report ({}): {}", e.what(), command_));
  }
}

}  // namespace partune::launch
