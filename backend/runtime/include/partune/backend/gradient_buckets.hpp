#pragma once
// A rank's gradient buckets, as its program counts them: one per layer of each of its
// chunks (a chunk without layers: bucket 0), with the embedding and head parameters in
// the buckets whose sizes the program counts them in (bucket_extras). Under expert
// parallelism a layer's experts are a bucket of their own, reduced over the expert-data
// group. With optimizer-state sharding (ZeRO-1) or sharded data parallelism each bucket
// is split over its group (ParameterShards): the optimizer steps the owned slices, and
// with sharding the parameters' storage goes after each use and comes back with each
// gather, except the tied embedding's when the same rank runs the embedding and the head
// (it stays gathered through the step).
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "partune/backend/gpt_model.hpp"
#include "partune/backend/parameter_shards.hpp"
#include "partune/costmodel/job.hpp"

namespace partune::backend {

using BucketKey = std::pair<int, int>;  // (chunk, layer in the chunk)

class GradientBuckets {
 public:
  // The buckets of pipeline stage `stage`'s chunks, from the parameters `model` holds.
  GradientBuckets(const Job& job, int stage, GPTModelImpl& model);

  // The parameters reduced over the data group, by bucket.
  std::map<BucketKey, std::vector<torch::Tensor>>& dense() { return dense_; }
  // A layer with experts under expert parallelism: its experts' parameters, reduced over
  // the expert-data group (and not in dense()).
  std::map<BucketKey, std::vector<torch::Tensor>>& experts() { return experts_; }

  // Splits every dense bucket over a group of `degree` ranks of which this is `index`;
  // `release_after_use` (sharded data parallelism) frees the parameters until their
  // gather, keeping the tied embedding's bucket gathered when `model` runs both the
  // embedding and the head. Returns the owned slices, the optimizer's parameters.
  std::vector<torch::Tensor> shard(int degree, int index, bool release_after_use);
  bool sharded() const { return !shards_.empty(); }
  ParameterShards& shard_of(const BucketKey& key) { return *shards_.at(key); }
  std::map<BucketKey, std::unique_ptr<ParameterShards>>& shards() { return shards_; }

  // A layer's parameters go once its compute is over (unless kept gathered).
  void release(const BucketKey& key);
  void release_all();
  // offload_parameters: a copy of the owned slice brought up for the bucket's next
  // gather, and taken by it (undefined when none was staged).
  void stage_for_gather(const BucketKey& key);
  torch::Tensor take_staged(const BucketKey& key);

  // The gradients of the parameters `chosen` picks that this rank sums: views of their
  // whole gradients (zeros made where undefined), or of their owned slices when sharded.
  std::vector<torch::Tensor> gradients_of(const std::function<bool(const torch::Tensor&)>& chosen);
  // Sharded: the owned slices' gradients zeroed and the parameters' dropped.
  void zero_sharded_gradients();

 private:
  std::map<BucketKey, std::vector<torch::Tensor>> dense_, experts_;
  std::map<BucketKey, std::unique_ptr<ParameterShards>> shards_;
  std::set<BucketKey> resident_;  // sharded buckets kept gathered through the step
  std::map<BucketKey, torch::Tensor> staged_;
  bool tied_embedding_resident_ = false;
};

}  // namespace partune::backend
