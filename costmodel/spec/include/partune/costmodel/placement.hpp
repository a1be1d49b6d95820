#pragma once
// Rank <-> (data, pipeline, tensor) coordinates for an order of the three axes, with
// SMP's rule: the right-most letter varies fastest over global ranks. "cluster" = "DPT",
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

// The job key parallel.placement_strategy, parsed once: the three axes from the slowest
// over global ranks to the fastest. The default is DPT (SMP's "cluster": tensor ranks
// are consecutive, so a tensor group fills a node first).
class PlacementOrder {
 public:
  PlacementOrder() = default;
  // "cluster" (= DPT), "spread" (= TPD), or a permutation of the letters D, P, T in any
  // case ("pdt" = "PDT"). The two names are lower case only. Throws
  // std::invalid_argument naming the bad string.
  static PlacementOrder parse(const std::string& text);
  // The six orders, in the order of their names: DPT, DTP, PDT, PTD, TDP, TPD.
  static const std::array<PlacementOrder, 6>& all();

  // The axis in position i, 0 the slowest and 2 the fastest.
  Axis axis(int i) const;
  // The canonical name: three capital letters, "DPT".
  std::string name() const;
  // SMP's name where it has one ("cluster" for DPT, "spread" for TPD), else name().
  std::string smp_name() const;

  bool operator==(const PlacementOrder& o) const { return index_ == o.index_; }
  bool operator!=(const PlacementOrder& o) const { return !(*this == o); }

 private:
  explicit PlacementOrder(unsigned char index) : index_(index) {}
  unsigned char index_ = 0;  // position in all(): one byte, so search points stay small
};

class Placement {
 public:
  Placement(PlacementOrder order, int data_degree, int pipeline_degree, int tensor_degree);

  int world_size() const { return degree_[0] * degree_[1] * degree_[2]; }
  RankCoords coords(int rank) const;
  int rank(const RankCoords& c) const;
  // Ranks sharing every coordinate with `rank` except `axis`, ordered by that axis.
  std::vector<int> group(int rank, Axis axis) const;
  // Distance between consecutive members of an axis group, in global ranks.
  int stride(Axis axis) const;
  int degree(Axis axis) const;
  PlacementOrder order() const { return order_; }

 private:
  PlacementOrder order_;
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
// The span of a group given by its members (global ranks, any order).
GroupSpan members_span(std::vector<int> members, int gpus_per_node);
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
