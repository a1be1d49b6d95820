#pragma once
// The layer plan's builder (layer_plan.hpp), shared by the files that write plans:
// layer_plan.cpp (the MLP, the embedding, the head) and attention_plan.cpp (the
// attention half: multi-head / grouped-query, and multi-head latent attention).
// Internal to costmodel/plan.
#include <algorithm>

#include "partune/costmodel/layer_plan.hpp"

namespace partune::detail {

// --- What PyTorch's eager operators run for an op (kernel_fusion eager), as partune's
// LibTorch backend runs them (eager_work.cpp). `n`: the elements of the tensor the op
// works on; `eb`: bytes an element.
struct PassWork {
  KernelWork forward, backward;
};
PassWork eager_norm(NormKind norm, double n, double eb);
PassWork eager_rotary(double n, double eb);  // one of the queries or keys
PassWork eager_activation(MlpKind mlp, double n, double eb);  // n: the output's elements
PassWork eager_residual(double n, double eb, bool dropout);
PassWork eager_bias(double n, double eb);  // n: the GEMM output's elements
// The attention core's layout copies around FlashAttention: q, kv the core's query and
// key/value elements (each of K and V).
PassWork eager_attention_layout(double q, double kv, double eb);
// The standard core's passes over its `scores` elements (q, kv as above).
PassWork eager_score_passes(double scores, double q, double kv, double eb);
// A GEMM Y[m x n] = X[m x k] W[k x n] in fp8 with per-tensor current scaling, as LibTorch's
// operators run it (backend/parallel/src/fp8_linear.cpp).
PassWork eager_fp8_gemm(double m, double n, double k);
// The same GEMM's operand casts as Transformer Engine's fused kernels run them (fp8_casts.cpp):
// one cast-transpose of X and of W forward and of dY backward (current scaling: each after
// an amax pass of its own); MXFP8 and NVFP4 write the row-wise and column-wise copies with
// their block scales in the one pass.
PassWork fused_low_precision_casts(Precision p, Fp8Recipe recipe, double m, double n, double k);

// One norm's parameters over `hidden`: scale and shift (layernorm), scale (rmsnorm).
inline double norm_params(const ModelSpec& m) { return (m.norm == NormKind::layernorm ? 2.0 : 1.0) * m.hidden; }

// Builds a plan op by op. `tokens` is b*s/cp (a context rank's share of the micro-batch);
// `seq_tokens` the tokens one rank holds outside the tensor-parallel regions (b*s/(cp t)
// with sequence parallelism, else b*s/cp).
struct PlanBuilder {
  const ModelSpec& m;
  const PlanConfig& c;
  LayerPlan plan;
  double t, tokens, seq_tokens;
  double scale;  // bytes_per_element / 2: the 16-bit accounting in the training precision

  PlanBuilder(const ModelSpec& model, const PlanConfig& config, PlanPart part)
      : m(model),
        c(config),
        t(config.tensor_degree),
        tokens(config.sequences * model.seq_len / std::max(1, config.context_degree)),
        scale(bytes_per_element(config.precision) / 2.0) {
    plan.part = part;
    plan.host_dispatch = !config.cuda_graphs;
    plan.ops.reserve(24);  // a layer has up to 21 ops: one allocation per plan
    seq_tokens = c.sequence_parallel ? tokens / t : tokens;
    plan.activation_bytes = activation_bytes();
  }

  // Y[tokens x out] = X[tokens x in] W: keeps its input (`stored_input` bytes) for the
  // weight gradient.
  void gemm(PlanOpRole role, double in, double out, double stored_input, double bias) {
    gemm_rows(role, in, out, stored_input, tokens);
    plan.ops.back().params += bias;
    if (bias > 0) {
      plan.ops.back().parameter_tensors += 1;
      eager_extra(eager_bias(tokens * out, element_bytes()));
    }
  }
  // The same over `rows` rows (a sequence shard's), no bias.
  void gemm_rows(PlanOpRole role, double in, double out, double stored_input, double rows) {
    PlanOp op;
    op.params = in * out;
    op.role = role;
    op.kind = PlanOpKind::gemm;
    op.m = rows;
    op.n = out;
    op.k = in;
    op.flops = 2.0 * rows * in * out;
    op.stored = stored_input * scale;
    op.parameter_tensors = 1;
    plan.ops.push_back(op);
    if (low_precision_gemms(c.precision)) {
      const PassWork casts =
          eager_kernels() ? eager_fp8_gemm(rows, out, in) : fused_low_precision_casts(c.precision, c.fp8_recipe, rows, out, in);
      plan.ops.back().casts_in_work = true;
      plan.ops.back().forward_work += casts.forward;
      plan.ops.back().backward_work += casts.backward;
    }
  }
  // A memory-bound kernel group as a fused stack runs it: `bytes` forward (backward moves
  // twice as much), with `kernels` launches forward (twice as many backward), element-wise.
  // With kernel_fusion eager the stack runs `eager` instead (eager_work.cpp).
  void memory_bound(PlanOpRole role, double bytes, int kernels, double stored, const PassWork& eager = {}) {
    PlanOp op;
    op.role = role;
    op.kind = PlanOpKind::memory_bound;
    if (eager_kernels() && eager.forward.total_kernels() > 0) {
      op.forward_work = eager.forward;
      op.backward_work = eager.backward;
    } else {
      op.forward_work.add(KernelClass::elementwise, bytes * scale, kernels);
      op.backward_work.add(KernelClass::elementwise, 2.0 * bytes * scale, 2 * kernels);
    }
    op.stored = stored * scale;
    plan.ops.push_back(op);
  }
  // Kernels an eager stack runs beside the op just added (a bias add, layout copies).
  void eager_extra(const PassWork& w) {
    if (!eager_kernels()) return;
    plan.ops.back().forward_work += w.forward;
    plan.ops.back().backward_work += w.backward;
  }
  bool eager_kernels() const { return c.kernel_fusion == KernelFusion::eager; }
  double element_bytes() const { return bytes_per_element(c.precision); }
  // A region edge: only where there is a tensor-parallel group.
  void comm(PlanOpRole role, Conjugate conj, double bytes, int count = 1) {
    if (c.tensor_degree <= 1) return;
    PlanOp op;
    op.role = role;
    op.kind = PlanOpKind::tensor_comm;
    op.conjugate = conj;
    op.comm_bytes = bytes;
    op.comm_count = count;
    const bool edge_of_gemm = role == PlanOpRole::attention_in || role == PlanOpRole::attention_out ||
                              role == PlanOpRole::mlp_in || role == PlanOpRole::mlp_out || role == PlanOpRole::head_in;
    op.comm_beside_gemm = c.tp_comm_overlap && edge_of_gemm &&
                          (conj == Conjugate::sp_gather || conj == Conjugate::sp_scatter);
    plan.ops.push_back(op);
  }
  // `batch` GEMMs of [rows x in] x [in x out] (a rank's experts), whose parameters are
  // the experts' (split over the expert group, reduced over the expert-data group).
  void expert_gemm(PlanOpRole role, double rows, double batch, double in, double out, double stored_input,
                   double bias) {
    gemm_rows(role, in, out, stored_input, rows);
    PlanOp& op = plan.ops.back();
    op.batch = batch;
    op.flops *= batch;
    for (KernelWork* w : {&op.forward_work, &op.backward_work})  // each expert's fp8 casts (eager)
      for (int i = 0; i < kKernelClasses; ++i) {
        w->bytes[i] *= batch;
        w->kernels[i] *= static_cast<int>(batch);
      }
    op.params = batch * (in * out + bias);
    op.expert = true;
  }
  // An all-to-all over the expert group, or an edge of the experts' tensor group: only
  // where there is such a group.
  void expert_comm(PlanOpRole role, double bytes) {
    const bool tensor_edge = role == PlanOpRole::expert_gather || role == PlanOpRole::expert_scatter;
    const bool block = role == PlanOpRole::token_gather || role == PlanOpRole::token_scatter;
    const int group = block ? c.experts_tensor_degree() * c.expert_degree
                            : tensor_edge ? c.experts_tensor_degree() : c.expert_degree;
    if (group <= 1) return;
    PlanOp op;
    op.role = role;
    op.kind = PlanOpKind::expert_comm;
    op.comm_bytes = bytes;
    op.comm_beside_gemm = c.moe_a2a_overlap;  // beside the kernels (parallel.moe_a2a_overlap)
    plan.ops.push_back(op);
  }
  // A context-parallel exchange around the attention core (the caller checks there is a
  // context group): its kind, payload, and whether it runs over the a2a sub-group.
  void context_comm(PlanOpRole role, ContextComm kind, double bytes, bool sub_group) {
    PlanOp op;
    op.role = role;
    op.kind = PlanOpKind::context_comm;
    op.context = kind;
    op.comm_bytes = bytes;
    op.context_sub_group = sub_group;
    plan.ops.push_back(op);
  }
  // The dropout mask's byte per element (none without dropout).
  double mask() const { return m.has_dropout() ? 1.0 : 0.0; }
  // The op just added holds `params` replicated parameters used on the sequence shard.
  void shard_gradient(double params) {
    if (c.sequence_parallel) plan.ops.back().shard_gradient_params = params;
  }
  // The op just added holds `params` parameter elements on this rank.
  void holds(double params, int tensors = 1) {
    plan.ops.back().params += params;
    plan.ops.back().parameter_tensors += tensors;
  }
  // A norm's scale (and shift): its parameters and tensors.
  void holds_norm(double width) {
    holds((m.norm == NormKind::layernorm ? 2.0 : 1.0) * width, m.norm == NormKind::layernorm ? 2 : 1);
  }
  Conjugate entry() const { return c.sequence_parallel ? Conjugate::sp_gather : Conjugate::f; }
  Conjugate exit() const { return c.sequence_parallel ? Conjugate::sp_scatter : Conjugate::g; }
  // The full activation b*s*h in the training precision: the collectives' S.
  double activation_bytes() const { return tokens * m.hidden * bytes_per_element(c.precision); }
};

// The MLP's exit edge (mlp_out) and its residual.
void mlp_exit(PlanBuilder& p);
// A layer with experts (moe_plan.cpp).
LayerPlan build_moe_layer_plan(const ModelSpec& m, const PlanConfig& c);

// The head's ops (layer_plan.cpp): entry edge, logits (over the embedding's table when
// `shared_projection`), cross-entropy and its reductions.
void head_ops(PlanBuilder& p, bool shared_projection);
// One multi-token-prediction depth's ops, appended to the head plan (mtp_plan.cpp).
void append_mtp_depth(LayerPlan& head, const ModelSpec& m, const PlanConfig& c);

// The attention half of a layer: its norm, the attention region (standard or latent), the
// projection and the residual, the MLP's norm and the edge entering the MLP region.
void attention_half(PlanBuilder& p);

}  // namespace partune::detail
