#pragma once
// Loading scenario files (YAML): instance types, clusters, models and jobs. A job may
// name its model and cluster by preset (looked up in the catalog), by path (relative to
// the job file), or inline. Every error is a ScenarioError naming file, key and reason.
#include <string>
#include <vector>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/job_rules.hpp"

namespace partune {

// Where presets live: scenarios/clusters/<instance>.yaml and scenarios/models/<name>.yaml.
// Defaults to $PARTUNE_SCENARIOS, else the source tree's scenarios/ folder.
std::string scenario_root();

InstanceType load_instance_type(const std::string& name_or_path);
ModelSpec load_model(const std::string& name_or_path);
// `overrides` are "key=value" settings applied on top of the file before it is checked
// (CLI --set): key is "section.key" or a bare key of parallel/training/cluster.
// Every key and value is checked, then the job rules `rules` names (job_rules.hpp):
// every rule (estimate, simulate, run), or with JobRules::settings all but the rules on
// the parallel layout (search and sweep: the parallel: section, or its absence, is where
// the search starts, not a layout that has to be legal already).
Job load_job(const std::string& path, const std::vector<std::string>& overrides = {},
             JobRules rules = JobRules::every);
// Parses a job from YAML text; `origin` names it in errors and anchors relative paths.
Job parse_job(const std::string& yaml_text, const std::string& origin,
              const std::vector<std::string>& overrides = {}, JobRules rules = JobRules::every);

std::vector<std::string> list_presets(const std::string& kind);  // "models" or "clusters"

}  // namespace partune
