#pragma once
// Shared between scenario.cpp and table.cpp (tables embed jobs).
#include <yaml-cpp/yaml.h>

#include <string>

#include "partune/costmodel/job.hpp"
#include "yaml_reader.hpp"

namespace partune::detail {

// A value that is a preset name, a path, or an inline mapping (optionally with
// `base:` naming a preset/path it overrides), resolved to one YAML mapping plus where
// errors about it should point.
struct Resolved {
  YAML::Node node;
  std::string file;
  std::string key;  // key prefix inside `file` ("" for a whole referenced file)
};
Resolved resolve_reference(const YAML::Node& value, const std::string& file, const std::string& key,
                           const std::string& preset_kind);

ModelSpec parse_model(const Reader& r);
InstanceType parse_instance_type(const Reader& r);
Cluster parse_cluster(const Reader& r);
Job parse_job_node(YAML::Node root, const std::string& file, const std::string& key_prefix);

}  // namespace partune::detail
