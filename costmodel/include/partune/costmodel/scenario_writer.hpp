#pragma once
// Writing scenario files: the other half of scenario.hpp's loader, so that one place
// owns the schema. What these functions write, the loader reads back to the same values.
#include <map>
#include <string>

#include "partune/costmodel/job.hpp"

namespace partune {

// Comments to put in a written file: `header` lines at the top (each line gets "# "),
// `keys` after a key's value, by dotted path ("gpu.hbm_bw_GBps"); a comment may have
// several lines (they line up under the first).
struct YamlComments {
  std::string header;
  std::map<std::string, std::string> keys;
};

// The YAML text of an instance type (kind: instance_type), every field the loader reads.
std::string instance_type_yaml(const InstanceType& it, const YamlComments& comments = {});

// The YAML text of a job: the model inline, the cluster by its catalog instance type when
// one of that name exists (else inline), every parallel and training knob.
std::string job_yaml(const Job& job, const std::string& origin_note);
// Writes atomically (a temporary file beside `path`, renamed into place).
void write_job_file(const std::string& path, const Job& job, const std::string& origin_note);

// A file that appears whole or not at all: a temporary file is created in the target's
// directory at construction (so a bad path fails before any work), written by commit()
// and renamed into place; the destructor removes it if commit() never succeeded.
// Throws std::runtime_error naming the path and the reason.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  const std::string& temp_path() const { return temp_; }
  // Writes `text` to the temporary file (mode 0644, synced); call rename_into_place() next.
  void write(const std::string& text);
  void rename_into_place();

 private:
  std::string path_, temp_;
  int fd_ = -1;
};

}  // namespace partune
