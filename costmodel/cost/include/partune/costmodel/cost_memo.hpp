#pragma once
// Remembered op times: what PlanMemo (plan_memo.hpp) does for the plans, for their times on
// one GPU. While a CostMemo lives on a thread, the layer, embedding and head times the stage
// costs ask for on that thread (remembered_plan_time) are computed once per plan and
// FlashAttention setting; the same figures, bit for bit. The search holds one per thread
// over its scratch job (search/src/judge_points.cpp).
#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/plan_memo.hpp"

namespace partune {

class CostMemo {
 public:
  // `model` and `gpu`: those objects, unchanged while the memo lives.
  CostMemo(const ModelSpec& model, const GpuProfile& gpu);
  ~CostMemo();
  CostMemo(const CostMemo&) = delete;
  CostMemo& operator=(const CostMemo&) = delete;

  struct State;

 private:
  PlanMemo plans_;
  State* state_;
  State* hidden_;
};

// plan_time(gpu, plan, c.precision, flash_attention) of `plan`, the `kind` plan of m at c
// (the caller's, already built), remembered when this thread's CostMemo holds `m` and `gpu`.
LayerTime remembered_plan_time(const GpuProfile& gpu, const ModelSpec& m, const PlanConfig& c, PlanKind kind,
                               const LayerPlan& plan, bool flash_attention);

}  // namespace partune
