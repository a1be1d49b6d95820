#include "partune/costmodel/placement.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <numeric>
#include <stdexcept>
#include <unordered_map>

namespace partune {

namespace {

// The six orders, index = PlacementOrder's position in all().
constexpr const char* kNames[6] = {"DPT", "DTP", "PDT", "PTD", "TDP", "TPD"};

Axis axis_of(char letter) { return letter == 'D' ? Axis::data : letter == 'P' ? Axis::pipeline : Axis::tensor; }

}  // namespace

PlacementOrder PlacementOrder::parse(const std::string& text) {
  // SMP's two names are matched exactly; the letters in any case.
  std::string letters = text == "cluster" ? "DPT" : text == "spread" ? "TPD" : text;
  for (char& c : letters) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (unsigned char i = 0; i < 6; ++i)
    if (letters == kNames[i]) return PlacementOrder(i);
  throw std::invalid_argument("'" + text + "' is not a placement: use cluster, spread or a permutation of D, P, T");
}

const std::array<PlacementOrder, 6>& PlacementOrder::all() {
  static const std::array<PlacementOrder, 6> orders = {PlacementOrder(0), PlacementOrder(1), PlacementOrder(2),
                                                       PlacementOrder(3), PlacementOrder(4), PlacementOrder(5)};
  return orders;
}

Axis PlacementOrder::axis(int i) const { return axis_of(kNames[index_][i]); }

std::string PlacementOrder::name() const { return kNames[index_]; }

std::string PlacementOrder::smp_name() const {
  return index_ == 0 ? "cluster" : index_ == 5 ? "spread" : name();
}

Placement::Placement(PlacementOrder order, int data_degree, int pipeline_degree, int tensor_degree)
    : order_(order) {
  degree_ = {data_degree, pipeline_degree, tensor_degree};
  // Right-most letter varies fastest: its stride is 1, and each letter to its left
  // strides over the product of the degrees to its right.
  int stride = 1;
  for (int i = 2; i >= 0; --i) {
    const int a = static_cast<int>(order_.axis(i));
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

namespace {

// subgroup_span's and stage_tensor_span's answers depend on a few numbers only; a search
// asks for the same few thousand combinations about a million times, so each thread
// remembers them.
using SpanKey = std::array<long, 9>;  // [0] says which function
struct SpanKeyHash {
  std::size_t operator()(const SpanKey& k) const {
    std::size_t h = 0;
    for (long v : k) h = h * 1000003u ^ std::hash<long>()(v);
    return h;
  }
};

template <class Compute>
GroupSpan remembered(const SpanKey& key, Compute compute) {
  constexpr std::size_t kRemembered = 1 << 16;
  thread_local std::unordered_map<SpanKey, GroupSpan, SpanKeyHash> known;
  if (const auto it = known.find(key); it != known.end()) return it->second;
  if (known.size() >= kRemembered) known.clear();
  return known[key] = compute();
}

GroupSpan compute_subgroup_span(int stride, int degree, int world, int subgroup_size, int gpus_per_node);
GroupSpan worst_tensor_span(const Placement& p, int stage, int gpus_per_node);

}  // namespace

GroupSpan subgroup_span(const Placement& p, Axis axis, int subgroup_size, int gpus_per_node) {
  const int stride = p.stride(axis), degree = p.degree(axis);
  if (stride % gpus_per_node == 0) return GroupSpan{subgroup_size, subgroup_size, 1};
  const SpanKey key{0, stride, degree, subgroup_size, gpus_per_node, p.world_size(), 0, 0, 0};
  return remembered(key, [&] { return compute_subgroup_span(stride, degree, p.world_size(), subgroup_size, gpus_per_node); });
}

namespace {

GroupSpan compute_subgroup_span(int stride, int degree, int world, int subgroup_size, int gpus_per_node) {
  // Groups are translates of the one holding rank 0, but a degree that does not divide a
  // node (tensor degree 3 on 8 GPUs) makes some translates straddle a node boundary. The
  // slowest group paces the collective's whole kind, so the span is the worst one: the
  // most nodes, then the fewest members on one node (the fewest NICs at a crossing).
  GroupSpan worst{subgroup_size, 0, subgroup_size};
  // (Members a whole number of nodes apart, one on each node, are answered before the
  // cache.) A group's layout over nodes depends only on its first member's rank modulo a
  // node and its place in the axis (modulo stride x degree): one period of both holds
  // every case.
  // The estimator calls this per job, so no allocation and a short loop.
  const long period = std::lcm(static_cast<long>(gpus_per_node), static_cast<long>(stride) * degree);
  const int limit = static_cast<int>(std::min<long>(world, period));
  for (int base = 0; base < limit; ++base) {
    if ((base / stride) % degree % subgroup_size != 0) continue;  // not the first member of a group
    // Members sit at increasing ranks base + i * stride: count nodes as the index changes.
    int nodes = 0, last = -1, run = 0, fewest = subgroup_size;
    for (int i = 0; i < subgroup_size; ++i) {
      const int node = (base + i * stride) / gpus_per_node;
      if (node != last) {
        if (run > 0) fewest = std::min(fewest, run);
        ++nodes, last = node, run = 0;
      }
      ++run;
    }
    fewest = std::min(fewest, run);
    if (nodes > worst.nodes || (nodes == worst.nodes && fewest < worst.per_node)) {
      worst.nodes = nodes;
      worst.per_node = fewest;
    }
  }
  return worst;
}

}  // namespace

namespace {

// Nodes a group touches and the fewest members it has on one of them.
GroupSpan span_of(const std::vector<int>& members, int gpus_per_node) {
  GroupSpan span{static_cast<int>(members.size()), 0, static_cast<int>(members.size())};
  int last = -1, run = 0;
  for (int r : members) {
    const int node = r / gpus_per_node;
    if (node != last) {
      if (run > 0) span.per_node = std::min(span.per_node, run);
      ++span.nodes, last = node, run = 0;
    }
    ++run;
  }
  span.per_node = std::min(span.per_node, run);
  return span;
}

}  // namespace

GroupSpan members_span(std::vector<int> members, int gpus_per_node) {
  std::sort(members.begin(), members.end());
  return span_of(members, gpus_per_node);
}

GroupSpan stage_tensor_span(const Placement& p, int stage, int gpus_per_node) {
  const SpanKey key{1, p.stride(Axis::data), p.stride(Axis::pipeline), p.stride(Axis::tensor), p.degree(Axis::data),
                    p.degree(Axis::pipeline), p.degree(Axis::tensor), stage, gpus_per_node};
  return remembered(key, [&] { return worst_tensor_span(p, stage, gpus_per_node); });
}

namespace {

GroupSpan worst_tensor_span(const Placement& p, int stage, int gpus_per_node) {
  GroupSpan worst{p.degree(Axis::tensor), 0, p.degree(Axis::tensor)};
  for (int d = 0; d < p.degree(Axis::data); ++d) {
    std::vector<int> members = p.group(p.rank(RankCoords{d, stage, 0}), Axis::tensor);
    std::sort(members.begin(), members.end());
    const GroupSpan span = span_of(members, gpus_per_node);
    if (span.nodes > worst.nodes || (span.nodes == worst.nodes && span.per_node < worst.per_node)) worst = span;
  }
  return worst;
}

}  // namespace

int same_stage_gpus(const Placement& p, int gpus_per_node, int gpus_per_link) {
  if (gpus_per_link <= 1) return 1;
  // Links serve aligned runs of gpus_per_link ranks; the layout repeats with the period of
  // the pipeline coordinate and of the nodes.
  const int stride = p.stride(Axis::pipeline), degree = p.degree(Axis::pipeline);
  // A stage's ranks come in runs of `stride`: runs that hold whole links share them alone.
  if (degree == 1 || stride % gpus_per_link == 0) return std::min(gpus_per_link, p.world_size());
  const long period = std::lcm(static_cast<long>(gpus_per_node), static_cast<long>(stride) * degree);
  const int limit = static_cast<int>(std::min<long>(p.world_size(), period));
  int most = 1;
  for (int base = 0; base < limit; base += gpus_per_link) {
    const int end = std::min(p.world_size(), base + gpus_per_link);
    for (int r = base; r < end; ++r) {
      const int stage = (r / stride) % degree;
      int same = 0;
      for (int q = base; q < end; ++q) same += (q / stride) % degree == stage;
      most = std::max(most, same);
    }
  }
  return most;
}

GroupSpan group_span(const Placement& p, Axis axis, int gpus_per_node) {
  return subgroup_span(p, axis, p.degree(axis), gpus_per_node);
}

}  // namespace partune
