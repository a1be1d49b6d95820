#pragma once
// The job rules (job.hpp's check_job) in two parts: the rules on the parallel layout,
// which a search chooses (the degrees dividing the GPUs, the heads and the layers; the
// global batch dividing into data-parallel ranks x micro-batches; the pipeline's stages
// and schedule; checkpointing, offload, sharding and sequence parallelism), and the
// settings no layout breaks or mends (the training's precision, fp8 recipe and attention
// kernel against the instance type; the sharding flavour's knobs). `estimate`,
// `simulate` and `run` hold a job to every rule; `search` and `sweep` take its parallel:
// section as a starting point and hold it to the settings alone.
#include "partune/costmodel/job.hpp"

namespace partune {

enum class JobRules {
  every,     // the job runs as written: its layout too (check_job)
  settings,  // the layout is a starting point a search varies (check_job_settings)
};

// The first violation of a rule no parallel layout mends; empty when there is none.
JobViolation check_job_settings(const Job& job);
// check_job or check_job_settings, as `rules` says.
JobViolation check_job(const Job& job, JobRules rules);

}  // namespace partune
