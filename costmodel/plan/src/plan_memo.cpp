#include "partune/costmodel/plan_memo.hpp"

#include <map>
#include <tuple>
#include <utility>

namespace partune {

namespace {

auto fields(const PlanConfig& c) {
  return std::make_tuple(c.sequences, c.tensor_degree, c.expert_degree, c.expert_tensor_degree, c.context_degree,
                         c.context_comm, c.context_a2a_degree, c.sequence_parallel, c.tp_comm_overlap, c.flash_attention,
                         c.attention_impl, c.precision, c.fp8_recipe, c.loss_precision, c.kernel_fusion, c.cuda_graphs,
                         c.recompute_modules, c.moe_dispatcher, c.moe_a2a_overlap);
}

struct KeyLess {
  bool operator()(const std::pair<PlanKind, PlanConfig>& a, const std::pair<PlanKind, PlanConfig>& b) const {
    if (a.first != b.first) return a.first < b.first;
    return plan_config_less(a.second, b.second);
  }
};

}  // namespace

struct PlanMemo::State {
  using Plans = std::map<std::pair<PlanKind, PlanConfig>, LayerPlan, KeyLess>;
  const ModelSpec* model;
  Plans plans;
  // The entry each kind found last: consecutive points mostly ask for the same plans.
  Plans::iterator last[4];
  bool has_last[4] = {false, false, false, false};
};

namespace {
thread_local PlanMemo::State* current = nullptr;
}

bool plan_config_less(const PlanConfig& a, const PlanConfig& b) { return fields(a) < fields(b); }

PlanMemo::PlanMemo(const ModelSpec& model) : state_(new State{&model, {}, {}, {}}), hidden_(current) { current = state_; }

PlanMemo::~PlanMemo() {
  current = hidden_;
  delete state_;
}

namespace detail {

LayerPlan remembered_plan(const ModelSpec& m, const PlanConfig& c, PlanKind kind, PlanBuild build) {
  if (current == nullptr || current->model != &m) return build(m, c);
  const auto k = static_cast<std::size_t>(kind);
  if (current->has_last[k] && fields(current->last[k]->first.second) == fields(c)) return current->last[k]->second;
  auto& plans = current->plans;
  const auto key = std::make_pair(kind, c);
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, build(m, c)).first;
  current->last[k] = it;
  current->has_last[k] = true;
  return it->second;
}

}  // namespace detail

}  // namespace partune
