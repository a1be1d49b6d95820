#pragma once
// Writes a Job back as a job file that estimate, simulate and run accept unchanged.
#include <string>

#include "partune/costmodel/job.hpp"

namespace partune::cli {

// The YAML text of a job: the model inline, the cluster by its catalog instance type
// when one of that name exists (else inline), every parallel and training knob.
std::string job_yaml(const Job& job, const std::string& origin_note);
// Writes atomically (a temporary file renamed into place).
void write_job_file(const std::string& path, const Job& job, const std::string& origin_note);

}  // namespace partune::cli
