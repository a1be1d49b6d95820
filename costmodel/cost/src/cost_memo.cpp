#include "partune/costmodel/cost_memo.hpp"

#include <map>
#include <tuple>

namespace partune {

namespace {

struct Key {
  PlanKind kind;
  PlanConfig config;
  bool flash;
};

struct KeyLess {
  bool operator()(const Key& a, const Key& b) const {
    if (a.kind != b.kind) return a.kind < b.kind;
    if (a.flash != b.flash) return a.flash < b.flash;
    return plan_config_less(a.config, b.config);
  }
};

}  // namespace

struct CostMemo::State {
  const ModelSpec* model;
  const GpuProfile* gpu;
  std::map<Key, LayerTime, KeyLess> times;
};

namespace {
thread_local CostMemo::State* current = nullptr;
}

CostMemo::CostMemo(const ModelSpec& model, const GpuProfile& gpu)
    : plans_(model), state_(new State{&model, &gpu, {}}), hidden_(current) {
  current = state_;
}

CostMemo::~CostMemo() {
  current = hidden_;
  delete state_;
}

LayerTime remembered_plan_time(const GpuProfile& gpu, const ModelSpec& m, const PlanConfig& c, PlanKind kind,
                               const LayerPlan& plan, bool flash_attention) {
  auto compute = [&] { return plan_time(gpu, plan, c.precision, flash_attention); };
  if (current == nullptr || current->model != &m || current->gpu != &gpu) return compute();
  const Key key{kind, c, flash_attention};
  auto it = current->times.find(key);
  if (it == current->times.end()) it = current->times.emplace(key, compute()).first;
  return it->second;
}

}  // namespace partune
