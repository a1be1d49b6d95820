#include "partune/costmodel/placement.hpp"

#include <algorithm>
#include <stdexcept>

namespace partune {

namespace {
int axis_index(char c) {
  switch (c) {
    case 'D': return static_cast<int>(Axis::data);
    case 'P': return static_cast<int>(Axis::pipeline);
    case 'T': return static_cast<int>(Axis::tensor);
  }
  return -1;
}
}  // namespace

std::string Placement::canonical(const std::string& strategy) {
  if (strategy == "cluster") return "DPT";
  if (strategy == "spread") return "TPD";
  std::string s = strategy;
  std::transform(s.begin(), s.end(), s.begin(), ::toupper);
  return s;
}

Placement::Placement(const std::string& order, int data_degree, int pipeline_degree,
                     int tensor_degree)
    : order_(canonical(order)) {
  std::string sorted = order_;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != "DPT")
    throw std::invalid_argument("'" + order +
                                "' is not a placement: use cluster, spread or a permutation of D, P, T");
  degree_ = {data_degree, pipeline_degree, tensor_degree};
  // Right-most letter varies fastest: its stride is 1, and each letter to its left
  // strides over the product of the degrees to its right.
  int stride = 1;
  for (int i = 2; i >= 0; --i) {
    const int a = axis_index(order_[i]);
    stride_[a] = stride;
    stride *= degree_[a];
  }
}

int Placement::degree(Axis axis) const { return degree_[static_cast<int>(axis)]; }
int Placement::stride(Axis axis) const { return stride_[static_cast<int>(axis)]; }

RankCoords Placement::coords(int rank) const {
  auto at = [&](Axis a) { return (rank / stride(a)) % degree(a); };
  return {at(Axis::data), at(Axis::pipeline), at(Axis::tensor)};
}

int Placement::rank(const RankCoords& c) const {
  return c.data * stride(Axis::data) + c.pipeline * stride(Axis::pipeline) +
         c.tensor * stride(Axis::tensor);
}

std::vector<int> Placement::group(int r, Axis axis) const {
  const int base = r - ((r / stride(axis)) % degree(axis)) * stride(axis);
  std::vector<int> members(degree(axis));
  for (int i = 0; i < degree(axis); ++i) members[i] = base + i * stride(axis);
  return members;
}

GroupSpan subgroup_span(const Placement& p, Axis axis, int subgroup_size, int gpus_per_node) {
  // Groups built from strides are translates of the group holding rank 0, so counting
  // nodes for that one group describes them all (up to alignment with node boundaries,
  // which we take from rank 0's group: placements with power-of-two degrees align).
  GroupSpan span;
  span.size = subgroup_size;
  // Members sit at increasing ranks i * stride, so distinct nodes are counted by
  // watching the node index change (no allocation: the estimator calls this per job).
  const int stride = p.stride(axis);
  int nodes = 0, last = -1;
  for (int i = 0; i < subgroup_size; ++i) {
    const int node = (i * stride) / gpus_per_node;
    if (node != last) ++nodes, last = node;
  }
  span.nodes = nodes;
  span.per_node = std::max(1, subgroup_size / span.nodes);
  return span;
}

GroupSpan group_span(const Placement& p, Axis axis, int gpus_per_node) {
  return subgroup_span(p, axis, p.degree(axis), gpus_per_node);
}

}  // namespace partune
