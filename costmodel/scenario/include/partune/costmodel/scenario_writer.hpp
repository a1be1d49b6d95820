#pragma once
// Writing scenario files: the other half of scenario.hpp's loader, so that one place
// owns the schema. What these functions write, the loader reads back to the same values.
#include <map>
#include <string>

#include "partune/costmodel/atomic_file.hpp"
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
// Writes atomically (AtomicFile: whole or not at all; throws OutputError).
void write_job_file(const std::string& path, const Job& job, const std::string& origin_note);

}  // namespace partune
