#pragma once
// A training job: model + cluster + training settings + parallel configuration, with
// SageMaker model parallel's knobs and names.
#include <string>

#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/model.hpp"

namespace partune {

enum class Optimizer { adam, sgd };
enum class PipelineSchedule { simple, interleaved };  // simple = GPipe, interleaved = 1F1B
enum class Checkpointing { none, selective, full };
enum class CollectiveAlgorithm { ring, tree, hierarchical, all_to_all };

const char* to_string(Optimizer o);
const char* to_string(PipelineSchedule s);
const char* to_string(Checkpointing c);
const char* to_string(CollectiveAlgorithm a);

struct TrainingConfig {
  int global_batch = 0;          // sequences per optimizer step
  Precision precision = Precision::fp16;
  Optimizer optimizer = Optimizer::adam;
  int gradient_accumulation = 1; // sequential forward/backward passes per step
};

struct ParallelConfig {
  int pipeline_parallel_degree = 1;
  int tensor_parallel_degree = 1;
  int sharded_data_parallel_degree = 1;
  int microbatches = 1;          // per pipeline pass (per accumulation step)
  int active_microbatches = 0;   // 0 = pipeline_parallel_degree + 2 (SMP's default)
  PipelineSchedule pipeline = PipelineSchedule::interleaved;
  int virtual_stages = 1;        // model chunks per rank (interleaved 1F1B when > 1)
  std::string placement_strategy = "cluster";
  Checkpointing activation_checkpointing = Checkpointing::none;
  bool offload_activations = false;
  int activation_loading_horizon = 4;  // layers reloaded ahead of backward
  bool shard_optimizer_state = false;
  bool flash_attention = false;
  CollectiveAlgorithm sharded_collective = CollectiveAlgorithm::ring;
  CollectiveAlgorithm data_parallel_collective = CollectiveAlgorithm::ring;
};

struct Job {
  std::string name;
  ModelSpec model;
  Cluster cluster;
  TrainingConfig training;
  ParallelConfig parallel;

  int world_size() const { return cluster.gpu_count(); }
  // Data-parallel degree derived from the others: world / (pp * tp). Sharded data
  // parallelism splits each data-parallel group into groups of this size.
  int data_parallel_degree() const;
  int microbatch_size() const;  // sequences per micro-batch per data-parallel rank
  int effective_active_microbatches() const;
};

// Checks every cross-field rule (degrees multiply to the GPU count, TP fits in a node,
// the batch divides into micro-batches, ...). Returns the empty string when the job is
// consistent, else "key: reason" for the first violation.
struct JobViolation {
  std::string key;
  std::string reason;
  explicit operator bool() const { return !reason.empty(); }
};
JobViolation check_job(const Job& job);

}  // namespace partune
