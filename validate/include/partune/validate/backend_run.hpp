#pragma once
// `partune validate`'s measurement: build/partune-run runs a job file with --json and
// --trace (into a private scratch directory), and its report and trace are read back as
// MeasuredRun. This binary stays free of LibTorch.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "partune/costmodel/scaled_job.hpp"
#include "partune/validate/validation.hpp"

namespace partune::validate {

struct BackendRunRequest {
  std::string file;                    // the job file
  std::vector<std::string> overrides;  // --set, passed on
  int steps = 0;
  int world_size = 0;                  // what the backend must run: checked
  ModelSpec model;                     // the scaled model it must run: checked
  std::string device = "cpu";          // partune run --device
};

struct BackendRun {
  nlohmann::json report;  // partune-run's --json report
  MeasuredRun measured;
};

// Throws std::runtime_error when the run fails or is not the run asked for (world size,
// model), quoting the backend's reason.
BackendRun run_on_backend(const BackendRunRequest& request);

}  // namespace partune::validate
