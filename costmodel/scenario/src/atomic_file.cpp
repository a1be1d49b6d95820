#include "partune/costmodel/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

namespace partune {

namespace {

namespace fs = std::filesystem;

[[noreturn]] void bad_path(const std::string& path, const std::string& reason) { throw OutputError(path, reason, true); }
[[noreturn]] void write_failed(const std::string& path, int err) {
  throw OutputError(path, std::string("cannot write: ") + std::strerror(err), false);
}

// Where `path`'s chain of symbolic links ends (the path itself when it is not a link); a
// dangling link resolves to the file it would create.
std::string resolve_links(const std::string& path) {
  fs::path p(path);
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p.string();
    const fs::path to = fs::read_symlink(p, ec);
    if (ec) bad_path(path, "cannot read the symbolic link: " + ec.message());
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  bad_path(path, "too many levels of symbolic links");
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty() || fs::path(path_).filename().empty()) bad_path(path_, "not a file name");
  target_ = resolve_links(path_);
  const fs::path t(target_);
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) bad_path(path_, "is a directory");
    if (!S_ISREG(st.st_mode))
      bad_path(path_, "is not a regular file (a device, a pipe or a socket): refusing to replace it");
    mode_ = st.st_mode & 07777;  // a replaced file keeps its permissions
  }
  const fs::path dir = t.has_parent_path() ? t.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) bad_path(path_, "folder '" + dir.string() + "' does not exist");
  std::string tmpl = (dir / ("." + t.filename().string() + ".tmp-XXXXXX")).string();
  fd_ = ::mkstemp(tmpl.data());
  if (fd_ < 0) bad_path(path_, std::string("cannot write in '") + dir.string() + "': " + std::strerror(errno));
  temp_ = tmpl;
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::write(const std::string& text) {
  if (fd_ < 0) throw std::logic_error("AtomicFile::write after close: " + path_);
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      write_failed(path_, errno);
    }
    off += static_cast<std::size_t>(n);
  }
}

void AtomicFile::close() {
  if (fd_ < 0) return;
  // mkstemp makes the file 0600: a new file gets 0644, a replaced one its old mode.
  const int fd = fd_;
  fd_ = -1;
  if (::fchmod(fd, mode_) != 0 || ::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    write_failed(path_, err);
  }
  if (::close(fd) != 0) write_failed(path_, errno);
}

void AtomicFile::commit() {
  close();
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    throw OutputError(path_, std::string("cannot replace it: ") + std::strerror(errno), false);
  temp_.clear();
}

void write_file_atomically(const std::string& path, const std::string& text) {
  AtomicFile file(path);
  file.write(text);
  file.commit();
}

void check_standard_output() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  const int err = errno;
  if (!flushed || std::ferror(stdout) != 0 || !std::cout)
    throw OutputError("standard output", err != 0 ? std::strerror(err) : "could not write everything printed", false);
}

}  // namespace partune
