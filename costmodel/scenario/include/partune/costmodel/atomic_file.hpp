#pragma once
// Output files that appear whole or not at all. Every file partune writes (job files,
// traces, profiles, reports) goes through AtomicFile.
#include <stdexcept>
#include <string>

namespace partune {

// A file that could not be written. The message names the path the user gave (never the
// temporary file). `bad_path` is true when the path itself cannot be used (a missing
// folder, a directory, a device): bad input, exit status 2. Otherwise the write failed
// on the way (disk full, I/O error): exit status 1.
class OutputError : public std::runtime_error {
 public:
  OutputError(const std::string& path, const std::string& reason, bool bad_path)
      : std::runtime_error(path + ": " + reason), bad_path_(bad_path) {}
  bool bad_path() const { return bad_path_; }

 private:
  bool bad_path_;
};

// The target is resolved at construction: a symbolic link is followed (the file it points
// to is replaced, the link stays), an existing target that is not a regular file is
// refused, and a temporary file is created in the target's directory (so a bad path fails
// before any work). write() appends to it; commit() checks that every byte reached the
// disk (fsync, close) and renames it over the target. The destructor removes the
// temporary file if commit() never succeeded, leaving the target untouched.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& path() const { return path_; }
  // The complete text written so far can be read back here before commit() (e.g. to
  // check that the loader accepts it).
  const std::string& temp_path() const { return temp_; }
  void write(const std::string& text);
  // Syncs and closes the temporary file; the target is not replaced yet. Called by
  // commit(); call it directly to read temp_path() back first.
  void close();
  void commit();

 private:
  std::string path_;    // as the user gave it: every message names it
  std::string target_;  // the file replaced: path_, or where its symbolic links lead
  std::string temp_;
  int fd_ = -1;
  unsigned mode_ = 0644;
};

// Writes `text` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& text);

// Flushes standard output and reports whether everything printed reached it; a command
// that printed its result to a full disk or a closed pipe must not exit 0.
// Throws OutputError("standard output", reason, false).
void check_standard_output();

}  // namespace partune
