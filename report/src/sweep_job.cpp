// The job a sweep varies, from its file or text (sweep_job.hpp).
#include "partune/report/sweep_job.hpp"

#include <yaml-cpp/yaml.h>

#include "partune/costmodel/scenario.hpp"

namespace partune::report {

namespace {

// Whether a mapping of the job file sets `key`, itself or through a merge key (<<).
bool sets_key(const YAML::Node& map, const std::string& key) {
  if (!map.IsMap()) return false;
  if (map[key].IsDefined()) return true;
  const YAML::Node merged = map["<<"];
  if (merged.IsMap()) return sets_key(merged, key);
  if (merged.IsSequence())
    for (const YAML::Node& m : merged)
      if (sets_key(m, key)) return true;
  return false;
}

// Whether the job file (or text) sets parallel.microbatches. Unreadable: no (loading the
// job says what is wrong).
bool sets_microbatches(const std::string& path, const std::string& text) {
  try {
    const YAML::Node root = text.empty() ? YAML::LoadFile(path) : YAML::Load(text);
    return root.IsMap() && sets_key(root["parallel"], "microbatches");
  } catch (const YAML::Exception&) {
    return false;
  }
}

}  // namespace

search::SweepJob sweep_job_file(const std::string& path, const std::vector<std::string>& overrides) {
  search::SweepJob job;
  job.base = load_job(path, overrides);
  job.origin = path;
  job.file_sets_microbatches = sets_microbatches(path, "");
  job.load = [path](const std::vector<std::string>& o) { return load_job(path, o); };
  return job;
}

search::SweepJob sweep_job_text(const std::string& text, const std::string& origin,
                                const std::vector<std::string>& overrides) {
  search::SweepJob job;
  job.base = parse_job(text, origin, overrides);
  job.origin = origin;
  job.file_sets_microbatches = sets_microbatches(origin, text);
  job.load = [text, origin](const std::vector<std::string>& o) { return parse_job(text, origin, o); };
  return job;
}

}  // namespace partune::report
