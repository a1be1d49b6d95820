#pragma once
// Automated partitioning (SMP's auto-partition): split a chain of modules (embedding,
// transformer layers, head) into pipeline stages, balancing compute time and memory with
// a memory_weight in [0, 1]; modules that share a parameter (tied embeddings) go to the
// same stage. Exact: dynamic programming over contiguous splits.
#include <string>
#include <vector>

#include "partune/costmodel/job.hpp"

namespace partune::search {

struct PartitionItem {
  std::string name;
  double time = 0;       // s per micro-batch (forward + backward + recompute)
  double memory = 0;     // bytes it keeps on the GPU
  bool is_layer = true;  // every stage holds at least one transformer layer
  // Items sharing a parameter with an earlier item give its index here: they run on that
  // item's stage and take no place in the chain (SMP places such modules together).
  int tied_to = -1;
};

struct Partition {
  std::vector<int> stage_of;          // per item
  std::vector<int> stage_layers;      // transformer layers per stage
  std::vector<double> stage_time, stage_memory;
  double objective = 0;               // max over stages of the weighted, normalised load
};

// Minimises max_s [(1 - w) * time_s / total_time + w * memory_s / total_memory] over
// contiguous splits of the untied items into `stages` stages with at least one layer
// each. Throws std::invalid_argument if no split exists (fewer layers than stages).
Partition partition_chain(const std::vector<PartitionItem>& items, int stages, double memory_weight);
// The same objective by trying every split: for tests on small chains.
Partition partition_brute_force(const std::vector<PartitionItem>& items, int stages, double memory_weight);

// The chain of a job's model with costs from the cost model: the embedding, every
// layer, the head (tied to the embedding when the model ties them).
std::vector<PartitionItem> model_items(const Job& job);

}  // namespace partune::search
