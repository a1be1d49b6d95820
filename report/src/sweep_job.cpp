// The job a sweep varies, from its file or text (sweep_job.hpp).
#include "partune/report/sweep_job.hpp"

#include <yaml-cpp/yaml.h>

#include "partune/costmodel/scenario.hpp"

namespace partune::report {

namespace {

// Whether a mapping of the job file sets `key`, itself or through a merge key (<<).
bool sets_key(const YAML::Node& map, const std::string& key) {
  if (!map.IsDefined() || !map.IsMap()) return false;  // (a key the file does not have: an undefined node)
  if (map[key].IsDefined()) return true;
  const YAML::Node merged = map["<<"];
  if (!merged.IsDefined()) return false;
  if (merged.IsMap()) return sets_key(merged, key);
  if (merged.IsSequence())
    for (const YAML::Node& m : merged)
      if (sets_key(m, key)) return true;
  return false;
}

// The job file (or text) as YAML; unreadable: null (loading the job says what is wrong).
YAML::Node job_yaml(const std::string& path, const std::string& text) {
  try {
    return text.empty() ? YAML::LoadFile(path) : YAML::Load(text);
  } catch (const YAML::Exception&) {
    return YAML::Node();
  }
}

// What the file itself says of the layout: whether it sets parallel.microbatches, and
// whether it has a parallel: section at all.
void read_layout(search::SweepJob& job, const std::string& path, const std::string& text) {
  const YAML::Node root = job_yaml(path, text);
  job.file_sets_microbatches = root.IsMap() && sets_key(root["parallel"], "microbatches");
  job.file_gives_layout = root.IsMap() && sets_key(root, "parallel");
}

}  // namespace

search::SweepJob sweep_job_file(const std::string& path, const std::vector<std::string>& overrides) {
  search::SweepJob job;
  job.base = load_job(path, overrides, JobRules::settings);
  job.origin = path;
  read_layout(job, path, "");
  job.load = [path](const std::vector<std::string>& o, JobRules rules) { return load_job(path, o, rules); };
  return job;
}

search::SweepJob sweep_job_text(const std::string& text, const std::string& origin,
                                const std::vector<std::string>& overrides) {
  search::SweepJob job;
  job.base = parse_job(text, origin, overrides, JobRules::settings);
  job.origin = origin;
  read_layout(job, origin, text);
  job.load = [text, origin](const std::vector<std::string>& o, JobRules rules) {
    return parse_job(text, origin, o, rules);
  };
  return job;
}

}  // namespace partune::report
