#pragma once
// Rank <-> (data, pipeline, tensor) coordinates for a placement string, with SMP's rule:
// the right-most letter varies fastest over global ranks. "cluster" = "DPT",
// "spread" = "TPD".
#include <array>
#include <string>
#include <vector>

namespace partune {

struct RankCoords {
  int data = 0;      // rdp: index in the data-parallel dimension
  int pipeline = 0;  // stage
  int tensor = 0;    // rank in the tensor-parallel group
  bool operator==(const RankCoords& o) const {
    return data == o.data && pipeline == o.pipeline && tensor == o.tensor;
  }
};

enum class Axis { data, pipeline, tensor };

class Placement {
 public:
  // order: "DPT", a permutation of D,P,T, or "cluster"/"spread". Throws
  // std::invalid_argument naming the bad string.
  Placement(const std::string& order, int data_degree, int pipeline_degree, int tensor_degree);

  int world_size() const { return degree_[0] * degree_[1] * degree_[2]; }
  RankCoords coords(int rank) const;
  int rank(const RankCoords& c) const;
  // Ranks sharing every coordinate with `rank` except `axis`, ordered by that axis.
  std::vector<int> group(int rank, Axis axis) const;
  // Distance between consecutive members of an axis group, in global ranks.
  int stride(Axis axis) const;
  int degree(Axis axis) const;
  const std::string& order() const { return order_; }

  static std::string canonical(const std::string& strategy);  // "cluster" -> "DPT"

 private:
  std::string order_;                 // e.g. "DPT"
  std::array<int, 3> degree_{};       // indexed by Axis
  std::array<int, 3> stride_{};       // indexed by Axis
};

// How a communication group lies on the nodes: the ranks of one group spread over
// `nodes` nodes with at least `per_node` of them on each. group_span gives the worst
// group of the kind (most nodes, then fewest members on a node): the one that paces it.
struct GroupSpan {
  int size = 1;
  int nodes = 1;
  int per_node = 1;
  // GPUs behind one NIC that run this kind of collective at the same moment, on average
  // (0: all the GPUs of the node do, each then has its 1/gpus_per_node share of the
  // node's NICs).
  double nic_sharers = 0;
};
GroupSpan group_span(const Placement& p, Axis axis, int gpus_per_node);
// A sharded-data-parallel group: `sdp` consecutive members of a data-parallel group.
GroupSpan subgroup_span(const Placement& p, Axis axis, int subgroup_size, int gpus_per_node);
// The worst tensor group of one pipeline stage (groups of a degree that does not divide a
// node straddle node boundaries in some stages and not in others).
GroupSpan stage_tensor_span(const Placement& p, int stage, int gpus_per_node);
// The most GPUs of one pipeline stage among the `gpus_per_link` consecutive GPUs of a
// node that share a link (a NIC, a PCIe switch). A stage's tensor collectives, the
// gradient buckets of the pipeline's drain (one stage after the other) and a stage's
// activation copies run at the same moment only on GPUs of that stage.
int same_stage_gpus(const Placement& p, int gpus_per_node, int gpus_per_link);

}  // namespace partune
