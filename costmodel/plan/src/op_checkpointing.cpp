// Checkpointing::op: torchtitan's op-level selective activation checkpointing, on the
// layer plan's ops (layer_plan.hpp's apply_op_checkpointing).
//
// torchtitan (models/llama3/parallelize_llama.py, _apply_ac_to_transformer_block with
// selective_ac_option "op"; the 8B recipe's default) wraps each transformer block in
// create_selective_checkpoint_contexts with a policy that saves the outputs of the ops in
// its save list (aten.mm, the scaled-dot-product attention kernels, reduce_scatter) except
// every second aten.mm (a per-block count: "mm_count % 2 == 0" is recomputed), and
// recomputes every other op. Backward then repeats the norms, rotary, activations,
// residuals and every second matmul from the block's input and the saved outputs.
#include "partune/costmodel/layer_plan.hpp"

#include <algorithm>
#include <vector>

namespace partune {

namespace {

// The output columns of the separate aten.mm calls a plan GEMM stands for, in forward
// order: QKV is wq, wk, wv; SwiGLU's fc1 is w1 (the gate) then w3; any other GEMM one call.
std::vector<double> separate_matmuls(const PlanOp& op, const ModelSpec& m, int t) {
  if (op.role == PlanOpRole::qkv) {
    const double q = static_cast<double>(m.heads) * m.head_dim() / t;
    const double kv = (op.n - q) / 2.0;
    return {q, kv, kv};
  }
  if (op.role == PlanOpRole::fc1 && m.mlp == MlpKind::swiglu) return {op.n / 2.0, op.n / 2.0};
  return {op.n};
}

bool grouped(const PlanOp& op) {  // torch._grouped_mm, not aten.mm: never saved
  return op.role == PlanOpRole::expert_fc1 || op.role == PlanOpRole::expert_fc2;
}

}  // namespace

void apply_op_checkpointing(LayerPlan& plan, const ModelSpec& m, int tensor_degree, double eb) {
  if (plan.part != PlanPart::layer) {  // the policy wraps transformer blocks only
    for (PlanOp& op : plan.ops) {
      op.op_recompute = op.dots_recompute = 0;
      op.op_saved = op.dots_saved = op.stored + op.recomputable;
    }
    return;
  }
  const int t = std::max(1, tensor_degree);
  int matmuls = 0;
  for (PlanOp& op : plan.ops) {
    op.op_recompute = op.dots_recompute = 1;
    op.op_saved = op.dots_saved = 0;
    if (op.kind == PlanOpKind::attention_core) {
      // Its output (the output projection's input) and log-sum-exp (fp32, a head a token).
      const PlanOp* projection = plan.find(PlanOpRole::projection);
      const double rows = projection ? projection->m : 0.0;
      op.op_recompute = op.dots_recompute = 0;
      op.op_saved = op.dots_saved = (projection ? rows * projection->k * eb : 0.0) + rows * m.heads / t * 4.0;
      continue;
    }
    if (op.kind != PlanOpKind::gemm || grouped(op)) continue;
    op.dots_recompute = 0;
    op.dots_saved = op.batch * op.m * op.n * eb;
    const std::vector<double> columns = separate_matmuls(op, m, t);
    double total = 0, repeated = 0;
    for (double n : columns) {
      total += n;
      if (++matmuls % 2 == 0) repeated += n;
      else op.op_saved += op.batch * op.m * n * eb;
    }
    op.op_recompute = total > 0 ? repeated / total : 0.0;
  }
}

}  // namespace partune
