// The layer with experts (layer_plan.hpp's moe_layer_plan): its attention half as a dense
// layer's, then the MLP as one of two dispatchers runs it.
//
// Megatron-Core's (megatron/core/transformer/moe: router.py, token_dispatcher.py's
// MoEAlltoAllTokenDispatcher, experts.py's TEGroupedMLP), whenever the layer works on a
// sequence shard (sequence_parallel) or on one tensor rank, the experts take a tensor
// degree of their own (MoE parallel folding, expert_grid.hpp) or the job names Megatron's
// allgather dispatcher: each rank routes its own tokens, sends them to the expert group,
// the experts' tensor group gathers them, each expert's GEMMs run on its slice of the
// width, the results are reduce-scattered and sent back (MoEAllGatherTokenDispatcher
// instead gathers every token of the expert-tensor x expert block and reduce-scatters).
// A fused stack applies the routing probabilities inside the experts' activation
// (experts.py imports Megatron's fused weighted_bias_swiglu_impl), so the unpermutation is
// a scatter-add that keeps nothing; an eager one (kernel_fusion eager: PyTorch operators,
// the LibTorch backend) weights the rows after the combine and keeps them. Shared experts
// are a dense MLP over the tensor group with their own sequence-parallel gather and
// reduce-scatter.
//
// partune's own (its LibTorch backend's, expert_parallel.cpp), with tensor parallelism and
// no sequence parallelism: every tensor rank routes the whole micro-batch (after mlp_in),
// its experts tensor-parallel like the dense MLP, the results weighted after the combine
// (keeping them for the probabilities' gradient), mlp_out summing the tensor ranks'
// partial sums. (With one tensor rank the two dispatchers send the same rows.)
#include <algorithm>
#include <vector>

#include "partune/costmodel/layer_plan.hpp"
#include "plan_builder.hpp"

namespace partune::detail {

namespace {

struct MoeShape {
  double h, f, fs, E, local, b, swiglu, reads, kept;
};

MoeShape moe_shape(const ModelSpec& m, const PlanConfig& c) {
  const bool gated = m.mlp == MlpKind::swiglu;
  return {static_cast<double>(m.hidden), static_cast<double>(m.expert_ffn_hidden),
          static_cast<double>(m.shared_expert_ffn_hidden), static_cast<double>(m.experts),
          static_cast<double>(m.experts) / std::max(1, c.expert_degree), m.bias ? 1.0 : 0.0, gated ? 2.0 : 1.0,
          gated ? 6.0 : 4.0, gated ? 4.0 : 2.0};
}

// The shared experts (DeepSeek's, Llama 4's): a dense MLP of fs on every token over the
// tensor group (its partial sums join mlp_out's).
void shared_experts(PlanBuilder& p, const MoeShape& s) {
  const double t = p.t, T = p.tokens, h = s.h, fs = s.fs;
  p.gemm(PlanOpRole::shared_fc1, h, s.swiglu * fs / t, 2.0 * p.seq_tokens * h, s.b * s.swiglu * fs / t);
  p.memory_bound(PlanOpRole::shared_activation, s.reads * T * fs / t, 2, s.kept * T * fs / t,
                 eager_activation(p.m.mlp, T * fs / t, p.element_bytes()));
  p.gemm(PlanOpRole::shared_fc2, fs / t, h, 2.0 * T * fs / t, s.b * h);
  if (p.m.bias) p.shard_gradient(h);
}

// The rank's experts: `local` products of rows / local rows each on `width` columns.
void experts(PlanBuilder& p, const MoeShape& s, double rows, double width) {
  const double h = s.h;
  p.expert_gemm(PlanOpRole::expert_fc1, rows / s.local, s.local, h, s.swiglu * width, 2.0 * rows * h,
                s.b * s.swiglu * width);
  p.memory_bound(PlanOpRole::expert_activation, s.reads * rows * width, 2, s.kept * rows * width,
                 eager_activation(p.m.mlp, rows * width, p.element_bytes()));
  p.expert_gemm(PlanOpRole::expert_fc2, rows / s.local, s.local, width, h, 2.0 * rows * width, s.b * h);
}

LayerPlan megatron_moe_plan(const ModelSpec& m, const PlanConfig& c) {
  PlanBuilder p(m, c, PlanPart::layer);
  const MoeShape s = moe_shape(m, c);
  const double X = p.seq_tokens, h = s.h, eb = bytes_per_element(c.precision);
  const double et = std::max(1, c.experts_tensor_degree());
  // Rows a rank sends (and, balanced, receives): its tokens' copies padded to capacity, on
  // the busiest expert rank when the router's load is skewed; the experts' tensor group
  // gathers et ranks' worth.
  const double R = m.capacity_factor * m.experts_per_token * X * m.busiest_expert_rank_load(c.expert_degree);
  attention_half(p);
  // The routed experts take the sequence shard: no region edge before them.
  auto& ops = p.plan.ops;
  ops.erase(std::remove_if(ops.begin(), ops.end(), [](const PlanOp& op) { return op.role == PlanOpRole::mlp_in; }),
            ops.end());
  p.gemm_rows(PlanOpRole::router, h, s.E, 0.0, X);
  // Each rank's router gradient covers its own tokens (its sequence shard): summed over
  // the tensor group with the norms' (Megatron sets the router's sequence_parallel).
  p.shard_gradient(h * s.E);
  const double shared_add = s.fs > 0 ? 2.0 * X * h : 0.0;  // the shared experts' output added
  // A fused stack applies the routing probabilities inside the experts' activation
  // (Megatron's weighted_bias_swiglu_impl): the unpermutation keeps nothing. An eager one
  // (PyTorch operators, the LibTorch backend) weights the rows after the combine and keeps
  // them for the probabilities' gradient.
  const double weighted_rows_kept = c.kernel_fusion == KernelFusion::eager ? 2.0 * h : 0.0;
  if (c.moe_dispatcher == MoeDispatcher::allgather) {
    // The block of et x ep ranks gathers its G = et ep X tokens; each rank permutes the
    // rows of its experts (et R of them, balanced), and reduce-scatters the results.
    const double G = et * c.expert_degree * X;
    p.expert_comm(PlanOpRole::token_gather, G * h * eb);
    p.memory_bound(PlanOpRole::routing, 4.0 * X * s.E + 2.0 * (G * h + et * R * h), 3, 2.0 * X * s.E);
    experts(p, s, et * R, s.f / et);
    p.memory_bound(PlanOpRole::unpermute, 2.0 * (et * R * h + G * h) + shared_add, 2, weighted_rows_kept * et * R);
    p.expert_comm(PlanOpRole::token_scatter, G * h * eb);
  } else {
    p.memory_bound(PlanOpRole::routing, 4.0 * X * s.E + 2.0 * (X * h + R * h), 3, 2.0 * X * s.E);
    p.expert_comm(PlanOpRole::dispatch, R * h * eb);
    p.expert_comm(PlanOpRole::expert_gather, et * R * h * eb);
    experts(p, s, et * R, s.f / et);
    p.expert_comm(PlanOpRole::expert_scatter, et * R * h * eb);
    p.expert_comm(PlanOpRole::combine, R * h * eb);
    // The weighted results scattered back into token order and summed.
    p.memory_bound(PlanOpRole::unpermute, 2.0 * (R * h + X * h) + shared_add, 2, weighted_rows_kept * R);
  }
  if (s.fs > 0) {
    p.comm(PlanOpRole::mlp_in, p.entry(), p.activation_bytes());
    shared_experts(p, s);
    mlp_exit(p);
  } else {
    const double Ts = p.seq_tokens;
    p.memory_bound(PlanOpRole::mlp_dropout_residual, (6.0 + p.mask()) * Ts * h, 2, p.mask() * Ts * h,
                   eager_residual(Ts * h, p.element_bytes(), m.has_dropout()));
  }
  for (PlanOp& op : p.plan.ops)  // (the shared experts' edges meet the token dispatch)
    if (op.role == PlanOpRole::mlp_in || op.role == PlanOpRole::mlp_out) op.comm_beside_gemm = false;
  apply_op_checkpointing(p.plan, m, c.tensor_degree, eb);
  apply_module_checkpointing(p.plan, c.recompute_modules);
  return std::move(p.plan);
}

LayerPlan replicated_moe_plan(const ModelSpec& m, const PlanConfig& c) {
  PlanBuilder p(m, c, PlanPart::layer);
  const MoeShape s = moe_shape(m, c);
  const double h = s.h, t = p.t, T = p.tokens, eb = bytes_per_element(c.precision);
  const double R = m.capacity_factor * m.experts_per_token * T * m.busiest_expert_rank_load(c.expert_degree);
  attention_half(p);
  // The router: hidden x experts, whole on every tensor rank (its gradient is the same on
  // each); softmax and top-k over the scores, then the tokens copied into expert order.
  // Keeps its input (counted with the norm's) and the probabilities.
  p.gemm(PlanOpRole::router, h, s.E, 0.0, 0.0);
  p.memory_bound(PlanOpRole::routing, 4.0 * T * s.E + 2.0 * (T * h + R * h), 3, 2.0 * T * s.E);
  p.expert_comm(PlanOpRole::dispatch, R * h * eb);
  experts(p, s, R, s.f / t);
  p.expert_comm(PlanOpRole::combine, R * h * eb);
  // Each token's experts_per_token results weighted by their probabilities and summed;
  // keeps the results for the probabilities' gradient. (With shared experts their output
  // is added too: another T h read.)
  p.memory_bound(PlanOpRole::unpermute, 2.0 * (R * h + T * h) + (s.fs > 0 ? 2.0 * T * h : 0.0), 2, 2.0 * R * h);
  if (s.fs > 0) shared_experts(p, s);
  mlp_exit(p);
  // (Megatron overlaps the attention's edges; the experts' region edges meet the token
  // dispatch, not a GEMM.)
  for (PlanOp& op : p.plan.ops)
    if (op.role == PlanOpRole::mlp_in || op.role == PlanOpRole::mlp_out) op.comm_beside_gemm = false;
  apply_op_checkpointing(p.plan, m, c.tensor_degree, eb);
  apply_module_checkpointing(p.plan, c.recompute_modules);
  return std::move(p.plan);
}

}  // namespace

LayerPlan build_moe_layer_plan(const ModelSpec& m, const PlanConfig& c) {
  const bool megatron = c.sequence_parallel || c.tensor_degree <= 1 || c.experts_tensor_degree() != c.tensor_degree ||
                        c.moe_dispatcher != MoeDispatcher::alltoall;
  return megatron ? megatron_moe_plan(m, c) : replicated_moe_plan(m, c);
}

}  // namespace partune::detail
