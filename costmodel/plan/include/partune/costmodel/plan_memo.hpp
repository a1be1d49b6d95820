#pragma once
// Remembered plans. A search asks for the same few layer, embedding and head plans (one per
// tensor degree, micro-batch size, precision, FlashAttention and sequence-parallel setting)
// for every one of a million points; building them again was a third of its first tier
// (docs/performance.md §2). While a PlanMemo lives on a thread, the plans that thread builds
// for its model are built once per (kind, PlanConfig) and copied out afterwards: the same
// plan, byte for byte. Plans of any other model (a copy of it included) are built as before.
#include <cstdint>

#include "partune/costmodel/layer_plan.hpp"

namespace partune {

enum class PlanKind : std::uint8_t { dense_layer, moe_layer, embedding, head };

class PlanMemo {
 public:
  // Remembers plans of `model` (that object: it must not change while the memo lives) on
  // the calling thread until destroyed; a memo made while another lives hides it.
  explicit PlanMemo(const ModelSpec& model);
  ~PlanMemo();
  PlanMemo(const PlanMemo&) = delete;
  PlanMemo& operator=(const PlanMemo&) = delete;

  struct State;

 private:
  State* state_;
  State* hidden_;
};

// A strict order over every field of PlanConfig (the memos' key).
bool plan_config_less(const PlanConfig& a, const PlanConfig& b);

namespace detail {
using PlanBuild = LayerPlan (*)(const ModelSpec&, const PlanConfig&);
// build(m, c), remembered when this thread's PlanMemo holds `m`.
LayerPlan remembered_plan(const ModelSpec& m, const PlanConfig& c, PlanKind kind, PlanBuild build);
}  // namespace detail

}  // namespace partune
