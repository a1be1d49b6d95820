#pragma once
// One gradient bucket's parameters split over a group of `degree` ranks, for optimizer-
// state sharding (ZeRO-1: the data-parallel group) and sharded data parallelism (the
// sharded group). Each parameter is split on its own into `degree` equal slices (its
// flattened values padded with zeros to a multiple of degree); rank k owns slice k of
// every parameter of the bucket. Splitting per parameter, not per bucket, makes a
// parameter's slice the same on every rank that holds the parameter whatever else its
// bucket holds: the two copies of a tied embedding (first and last pipeline stage) sum
// their owned slices directly (CommGroup::embedding).
//
// Packed layout [degree, S]: row k is rank k's slices of every parameter, concatenated
// (S = the sum of the slice lengths). A reduce-scatter is an all-reduce of the packed
// gradients keeping row `index` (Gloo in LibTorch 1.13 has no reduce-scatter); an
// all-gather of the owned row gives the packed parameters back.
#include <cstdint>
#include <vector>

#include <torch/torch.h>

namespace partune::backend {

class ParameterShards {
 public:
  ParameterShards(std::vector<torch::Tensor> params, int degree, int index);

  // This rank's slices (a leaf: the optimizer's parameter) and their gradient sum.
  torch::Tensor& owned() { return owned_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  int degree() const { return degree_; }
  int index() const { return index_; }

  // [degree, S]: the parameters' gradients (zeros where undefined) packed by owner.
  torch::Tensor pack_gradients() const;
  // [degree, S] -> each parameter's values (the all-gathered owned rows).
  void unpack_parameters(const torch::Tensor& packed);
  // The owned slice of parameter `param` inside owned() (its offset and length).
  std::pair<std::int64_t, std::int64_t> owned_segment(std::size_t param) const;

  // Sharded data parallelism: frees the parameters' storage after use and allocates it
  // again before the next gather (the tensors, and the autograd graphs holding them,
  // stay; only their memory goes), as FSDP does.
  void release();
  void materialise();
  bool materialised() const { return materialised_; }

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::int64_t> slice_, offset_;  // per parameter: slice length, offset in a row
  std::int64_t row_ = 0;
  int degree_ = 1, index_ = 0;
  torch::Tensor owned_;
  bool materialised_ = true;
};

}  // namespace partune::backend
