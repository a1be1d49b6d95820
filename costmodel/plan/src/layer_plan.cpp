// The layer plan (layer_plan.hpp): the ops of a transformer layer, the embedding and the
// LM head on one tensor-parallel rank, with what each computes, moves, keeps and
// communicates.
//
// Units: bytes. A layer's figures are written as Korthikanti et al. count them (2 bytes an
// activation element, 1 a dropout mask) and scaled by bytes_per_element / 2 for other
// precisions (`scale`), as memory-bound traffic is.
#include "partune/costmodel/layer_plan.hpp"

#include <stdexcept>
#include <string>
#include <tuple>

#include "plan_builder.hpp"

namespace partune {

const char* to_string(Conjugate c) {
  switch (c) {
    case Conjugate::f: return "f";
    case Conjugate::g: return "g";
    case Conjugate::sp_gather: return "sp_gather";
    case Conjugate::sp_scatter: return "sp_scatter";
    case Conjugate::gather: return "gather";
    case Conjugate::split: return "split";
    case Conjugate::loss_reduce: return "loss_reduce";
  }
  return "?";
}

const char* to_string(KernelClass c) {
  switch (c) {
    case KernelClass::elementwise: return "elementwise";
    case KernelClass::strided: return "strided";
    case KernelClass::norm: return "norm";
    case KernelClass::copy: return "copy";
    case KernelClass::strided_copy: return "strided_copy";
    case KernelClass::transpose: return "transpose";
  }
  return "?";
}

const char* to_string(PlanOpRole r) {
  switch (r) {
    case PlanOpRole::input_norm: return "input_norm";
    case PlanOpRole::attention_in: return "attention_in";
    case PlanOpRole::qkv: return "qkv";
    case PlanOpRole::q_down: return "q_down";
    case PlanOpRole::kv_down: return "kv_down";
    case PlanOpRole::latent_norm: return "latent_norm";
    case PlanOpRole::q_up: return "q_up";
    case PlanOpRole::kv_up: return "kv_up";
    case PlanOpRole::qk_norm: return "qk_norm";
    case PlanOpRole::rotary: return "rotary";
    case PlanOpRole::context_in: return "context_in";
    case PlanOpRole::context_ring: return "context_ring";
    case PlanOpRole::attention: return "attention";
    case PlanOpRole::context_out: return "context_out";
    case PlanOpRole::projection: return "projection";
    case PlanOpRole::attention_out: return "attention_out";
    case PlanOpRole::attention_dropout_residual: return "attention_dropout_residual";
    case PlanOpRole::mlp_norm: return "mlp_norm";
    case PlanOpRole::mlp_in: return "mlp_in";
    case PlanOpRole::fc1: return "fc1";
    case PlanOpRole::activation: return "activation";
    case PlanOpRole::fc2: return "fc2";
    case PlanOpRole::router: return "router";
    case PlanOpRole::routing: return "routing";
    case PlanOpRole::dispatch: return "dispatch";
    case PlanOpRole::expert_fc1: return "expert_fc1";
    case PlanOpRole::expert_activation: return "expert_activation";
    case PlanOpRole::expert_fc2: return "expert_fc2";
    case PlanOpRole::token_gather: return "token_gather";
    case PlanOpRole::token_scatter: return "token_scatter";
    case PlanOpRole::expert_gather: return "expert_gather";
    case PlanOpRole::expert_scatter: return "expert_scatter";
    case PlanOpRole::combine: return "combine";
    case PlanOpRole::unpermute: return "unpermute";
    case PlanOpRole::shared_fc1: return "shared_fc1";
    case PlanOpRole::shared_activation: return "shared_activation";
    case PlanOpRole::shared_fc2: return "shared_fc2";
    case PlanOpRole::mlp_out: return "mlp_out";
    case PlanOpRole::mlp_dropout_residual: return "mlp_dropout_residual";
    case PlanOpRole::embedding_lookup: return "embedding_lookup";
    case PlanOpRole::embedding_out: return "embedding_out";
    case PlanOpRole::head_in: return "head_in";
    case PlanOpRole::logits: return "logits";
    case PlanOpRole::loss: return "loss";
    case PlanOpRole::loss_reduce: return "loss_reduce";
    case PlanOpRole::mtp_embedding: return "mtp_embedding";
    case PlanOpRole::mtp_embedding_out: return "mtp_embedding_out";
    case PlanOpRole::mtp_norms: return "mtp_norms";
    case PlanOpRole::mtp_projection_in: return "mtp_projection_in";
    case PlanOpRole::mtp_projection: return "mtp_projection";
    case PlanOpRole::mtp_gather: return "mtp_gather";
    case PlanOpRole::mtp_split: return "mtp_split";
  }
  return "?";
}

PlanConfig plan_config(const Job& job) {
  PlanConfig c;
  c.sequences = job.microbatch_size();
  c.tensor_degree = job.parallel.tensor_parallel_degree;
  c.expert_degree = job.parallel.expert_parallel_degree;
  c.expert_tensor_degree = job.expert_tensor_degree();
  c.moe_dispatcher = job.parallel.moe_token_dispatcher;
  c.moe_a2a_overlap = job.model.is_moe() && job.parallel.moe_a2a_overlap;
  c.context_degree = job.parallel.context_parallel_degree;
  c.context_comm = job.parallel.cp_comm_type;
  c.context_a2a_degree = job.parallel.context_a2a_degree;
  c.sequence_parallel = job.parallel.sequence_parallel && c.tensor_degree > 1;
  c.tp_comm_overlap = c.sequence_parallel && job.parallel.tp_comm_overlap;
  c.flash_attention = job.parallel.flash_attention;
  c.attention_impl = job.training.attention_impl;
  c.fp8_recipe = job.training.fp8_recipe;
  c.precision = job.training.precision;
  c.loss_precision = job.training.loss_precision;
  c.kernel_fusion = job.training.kernel_fusion;
  c.cuda_graphs = job.training.cuda_graphs;
  if (job.parallel.activation_checkpointing == Checkpointing::selective)
    c.recompute_modules = job.parallel.recompute_modules;
  return c;
}

namespace {
auto fields(const PlanConfig& c) {
  return std::make_tuple(c.sequences, c.tensor_degree, c.expert_degree, c.expert_tensor_degree, c.context_degree,
                         c.context_comm, c.context_a2a_degree, c.sequence_parallel, c.tp_comm_overlap, c.flash_attention,
                         c.attention_impl, c.precision, c.fp8_recipe, c.loss_precision, c.kernel_fusion, c.cuda_graphs,
                         c.recompute_modules, c.moe_dispatcher, c.moe_a2a_overlap);
}
}  // namespace

bool plan_config_less(const PlanConfig& a, const PlanConfig& b) { return fields(a) < fields(b); }
bool same_plan_config(const PlanConfig& a, const PlanConfig& b) { return fields(a) == fields(b); }

using detail::attention_half;
using detail::norm_params;
using detail::PlanBuilder;
using detail::build_moe_layer_plan;
using detail::eager_activation;
using detail::eager_residual;

namespace detail {

// The MLP's residual after its exit edge.
void mlp_exit(PlanBuilder& p) {
  const double Ts = p.seq_tokens, h = p.m.hidden;
  p.comm(PlanOpRole::mlp_out, p.exit(), p.activation_bytes());
  p.memory_bound(PlanOpRole::mlp_dropout_residual, (6.0 + p.mask()) * Ts * h, 2, p.mask() * Ts * h,
                 eager_residual(Ts * h, p.element_bytes(), p.m.has_dropout()));
}

}  // namespace detail

using detail::mlp_exit;

LayerPlan transformer_layer_plan(const ModelSpec& m, const PlanConfig& c) {
  PlanBuilder p(m, c, PlanPart::layer);
  const double h = m.hidden, f = m.ffn_hidden, t = p.t, T = p.tokens;
  const double column_input = 2.0 * p.seq_tokens * h, b = m.bias ? 1.0 : 0.0;
  attention_half(p);
  if (m.mlp == MlpKind::swiglu) {
    // fc1 is the gate and up matrices side by side (2f/t columns); SwiGLU reads both
    // halves and writes their product silu(gate) * up, keeping both halves.
    p.gemm(PlanOpRole::fc1, h, 2.0 * f / t, column_input, b * 2.0 * f / t);
    p.memory_bound(PlanOpRole::activation, 6.0 * T * f / t, 2, 4.0 * T * f / t,
                   eager_activation(m.mlp, T * f / t, p.element_bytes()));
  } else {
    p.gemm(PlanOpRole::fc1, h, f / t, column_input, b * f / t);
    // GeLU over the rank's f/t columns: reads and writes them, keeps its input.
    p.memory_bound(PlanOpRole::activation, 4.0 * T * f / t, 2, 2.0 * T * f / t,
                   eager_activation(m.mlp, T * f / t, p.element_bytes()));
  }
  p.gemm(PlanOpRole::fc2, f / t, h, 2.0 * T * f / t, b * h);
  if (m.bias) p.shard_gradient(h);
  mlp_exit(p);
  apply_op_checkpointing(p.plan, m, c.tensor_degree, bytes_per_element(c.precision));
  apply_module_checkpointing(p.plan, c.recompute_modules);
  return std::move(p.plan);
}

LayerPlan layer_plan(const ModelSpec& m, const PlanConfig& c, bool moe) {
  return moe ? moe_layer_plan(m, c) : transformer_layer_plan(m, c);
}

LayerPlan embedding_plan(const ModelSpec& m, const PlanConfig& c) {
  PlanBuilder p(m, c, PlanPart::embedding);
  const double eb = bytes_per_element(c.precision), T = p.tokens, h = m.hidden;
  // Token and position lookups and their sum; backward scatters into the tables.
  PlanOp lookup;
  lookup.role = PlanOpRole::embedding_lookup;
  lookup.kind = PlanOpKind::memory_bound;
  // (Rotary positions have no table: one lookup.)
  const bool learned = m.positions == PositionKind::learned;
  const double positions = learned ? static_cast<double>(m.seq_len) * h : 0.0;
  lookup.forward_work.add(KernelClass::elementwise, (learned ? 2.0 : 1.0) * T * h * eb, 1);
  lookup.backward_work.add(KernelClass::elementwise, (learned ? 3.0 : 2.0) * T * h * eb, 1);
  lookup.params = static_cast<double>(m.vocab) * h / p.t + positions;
  lookup.parameter_tensors = learned ? 2 : 1;
  p.plan.ops.push_back(lookup);
  // With sequence parallelism the lookups' partial sums are reduce-scattered (sp_scatter)
  // and each rank adds its shard's positions: the position table's gradient is the
  // shard's. (Megatron with learned positions all-reduces, adds them and splits instead.)
  if (learned) p.shard_gradient(positions);
  // The vocabulary-parallel lookup leaves partial sums on every tensor rank.
  p.comm(PlanOpRole::embedding_out, p.exit(), p.activation_bytes());
  apply_op_checkpointing(p.plan, m, c.tensor_degree, bytes_per_element(c.precision));
  apply_module_checkpointing(p.plan, c.recompute_modules);
  return std::move(p.plan);
}

namespace detail {

// The head's ops: the entry edge, the logits GEMM over the rank's vocabulary slice (its
// weight the head's own, or the embedding's table when `shared_projection`; the final norm
// before it travels with it), the cross-entropy and its reductions.
void head_ops(PlanBuilder& p, bool shared_projection) {
  const ModelSpec& m = p.m;
  const double T = p.tokens, h = m.hidden, v = static_cast<double>(m.vocab) / p.t;
  const double eb = p.element_bytes();
  p.comm(PlanOpRole::head_in, p.entry(), p.activation_bytes());
  // Its input is the last layer's output, kept there. A tied projection is the
  // embedding's table (held there); the final norm before it travels with it.
  p.gemm(PlanOpRole::logits, h, v, 0.0, 0.0);
  p.plan.ops.back().params = (shared_projection ? 0.0 : h * v) + norm_params(m);
  p.plan.ops.back().parameter_tensors = (shared_projection ? 0 : 1) + (m.norm == NormKind::layernorm ? 2 : 1);
  p.shard_gradient(norm_params(m));  // the final norm before it, on the sequence shard
  // Cross-entropy over the local vocabulary slice: reads the logits and writes the
  // probabilities forward, reads them and writes the gradient backward. In fp32 it
  // works on an fp32 copy and keeps it beside the 16-bit logits (6 bytes a logit); in
  // the training precision it works in place over the logits (eb bytes a logit).
  const bool in_place = p.c.loss_precision == LossPrecision::training;
  const double work = in_place ? eb : 4.0;
  PlanOp loss;
  loss.role = PlanOpRole::loss;
  loss.kind = PlanOpKind::memory_bound;
  // (Eager: LibTorch's log-softmax kernels, a norm's class.)
  const KernelClass softmax = p.eager_kernels() ? KernelClass::norm : KernelClass::elementwise;
  loss.forward_work.add(softmax, T * v * (eb + work), 3);
  loss.backward_work.add(softmax, T * v * (work + eb), 2);
  loss.stored = (in_place ? eb : 6.0) * T * v;
  p.plan.ops.push_back(loss);
  // The maximum, the sum of exponentials and the target logit, each b*s fp32 values.
  p.comm(PlanOpRole::loss_reduce, Conjugate::loss_reduce, 4.0 * T, 3);
}

}  // namespace detail

LayerPlan head_plan(const ModelSpec& m, const PlanConfig& c) {
  PlanBuilder p(m, c, PlanPart::head);
  detail::head_ops(p, m.tied_embeddings);
  apply_op_checkpointing(p.plan, m, c.tensor_degree, bytes_per_element(c.precision));
  apply_module_checkpointing(p.plan, c.recompute_modules);
  for (int depth = 0; depth < m.mtp_layers; ++depth) detail::append_mtp_depth(p.plan, m, c);
  return std::move(p.plan);
}

LayerPlan moe_layer_plan(const ModelSpec& m, const PlanConfig& c) { return build_moe_layer_plan(m, c); }

double LayerPlan::forward_flops() const { return gemm_flops() + attention_flops(); }

double LayerPlan::gemm_flops() const {
  double sum = 0;
  for (const PlanOp& op : ops)
    if (op.kind == PlanOpKind::gemm) sum += op.flops;
  return sum;
}

double LayerPlan::attention_flops() const {
  double sum = 0;
  for (const PlanOp& op : ops)
    if (op.kind == PlanOpKind::attention_core) sum += op.flops;
  return sum;
}

namespace {
bool computes(const PlanOp& op) {
  return op.kind != PlanOpKind::tensor_comm && op.kind != PlanOpKind::expert_comm &&
         op.kind != PlanOpKind::context_comm;
}
}  // namespace

double recompute_share(const PlanOp& op, Checkpointing policy) {
  switch (policy) {
    case Checkpointing::none: return 0.0;
    case Checkpointing::selective: return op.selective_recompute ? 1.0 : 0.0;
    case Checkpointing::full: return computes(op) ? 1.0 : 0.0;
    case Checkpointing::op: return computes(op) ? op.op_recompute : 0.0;
    case Checkpointing::dots: return computes(op) ? op.dots_recompute : 0.0;
  }
  return 0.0;
}

bool recomputed(const PlanOp& op, Checkpointing policy) { return recompute_share(op, policy) > 0; }

namespace {
// What `op` keeps for backward under `policy`: nothing of its own under full (the layer
// keeps its input instead), else its stored bytes and, unless it is recomputed, its
// recomputable ones.
double kept_bytes(const PlanOp& op, Checkpointing policy) {
  if (policy == Checkpointing::full) return 0.0;
  if (policy == Checkpointing::op) return op.op_saved;
  if (policy == Checkpointing::dots) return op.dots_saved;
  const double dropped = policy == Checkpointing::selective ? op.selective_dropped : 0.0;
  return op.stored + (recomputed(op, policy) ? 0.0 : op.recomputable) - dropped;
}
}  // namespace

double LayerPlan::stored_bytes(Checkpointing policy) const {
  if (policy == Checkpointing::full) return input_bytes;
  const bool by_matmul = policy == Checkpointing::op || policy == Checkpointing::dots;
  double sum = by_matmul && part == PlanPart::layer ? input_bytes : 0.0;
  for (const PlanOp& op : ops) sum += kept_bytes(op, policy);
  return sum;
}

double LayerPlan::weight_gradient_bytes(double element_bytes) const {
  double elements = 0;
  for (const PlanOp& op : ops)
    if (op.kind == PlanOpKind::gemm) elements += op.batch * (op.m * op.k + op.m * op.n);
  return elements * element_bytes;
}

double LayerPlan::recomputed_flops(Checkpointing policy) const {
  double gemm = 0, attention = 0;  // summed as forward_flops sums them
  for (const PlanOp& op : ops) {
    const double share = recompute_share(op, policy);
    if (share <= 0) continue;
    if (op.kind == PlanOpKind::gemm) gemm += share * op.flops;
    if (op.kind == PlanOpKind::attention_core) attention += share * op.flops;
  }
  return gemm + attention;
}

double LayerPlan::recomputed_bytes(Checkpointing policy) const {
  double sum = 0;
  for (const PlanOp& op : ops) {
    const double share = recompute_share(op, policy);
    if (share > 0) sum += std::max(0.0, share * (op.stored + op.recomputable) - kept_bytes(op, policy));
  }
  return sum;
}

double LayerPlan::params() const {
  double sum = 0;
  for (const PlanOp& op : ops) sum += op.params;
  return sum;
}

int LayerPlan::parameter_tensors() const {
  int sum = 0;
  for (const PlanOp& op : ops) sum += op.parameter_tensors;
  return sum;
}

double LayerPlan::expert_params() const {
  double sum = 0;
  for (const PlanOp& op : ops)
    if (op.expert) sum += op.params;
  return sum;
}

double LayerPlan::shard_gradient_params() const {
  double sum = 0;
  for (const PlanOp& op : ops) sum += op.shard_gradient_params;
  return sum;
}

const PlanOp* LayerPlan::find(PlanOpRole role) const {
  for (const PlanOp& op : ops)
    if (op.role == role) return &op;
  return nullptr;
}

const PlanOp& LayerPlan::op(PlanOpRole role) const {
  if (const PlanOp* found = find(role)) return *found;
  const char* where = part == PlanPart::layer ? "layer" : part == PlanPart::embedding ? "embedding" : "head";
  throw std::logic_error(std::string("layer plan: the ") + where + " plan has no " + to_string(role) + " op");
}

namespace {

// What one conjugate runs in a pass. The backward of a sequence-parallel gather also
// re-gathers the GEMM's input (overlapped with its input gradient).
// With tensor-parallel communication overlap (PlanOp::comm_beside_gemm) the sequence-
// parallel collectives all run beside their GEMMs.
void conjugate_collectives(const PlanOp& op, bool forward, std::vector<TensorCollective>& out) {
  auto add = [&](CollectiveKind kind, bool overlapped = false) {
    out.push_back({kind, PlanGroup::tensor, op.comm_bytes, op.comm_count, overlapped || op.comm_beside_gemm});
  };
  switch (op.conjugate) {
    case Conjugate::f:
      if (!forward) add(CollectiveKind::all_reduce);
      break;
    case Conjugate::g:
      if (forward) add(CollectiveKind::all_reduce);
      break;
    case Conjugate::sp_gather:
      if (forward) {
        add(CollectiveKind::all_gather);
      } else {
        add(CollectiveKind::all_gather, true);
        add(CollectiveKind::reduce_scatter);
      }
      break;
    case Conjugate::sp_scatter: add(forward ? CollectiveKind::reduce_scatter : CollectiveKind::all_gather); break;
    case Conjugate::gather:
      if (forward) add(CollectiveKind::all_gather);
      break;
    case Conjugate::split:
      if (!forward) add(CollectiveKind::all_gather);
      break;
    case Conjugate::loss_reduce:
      if (forward) add(CollectiveKind::all_reduce);
      break;
  }
}

// What one context-parallel exchange runs in a pass (layer_plan.hpp).
void context_collectives(const PlanOp& op, bool forward, std::vector<TensorCollective>& out) {
  const PlanGroup group = op.context_sub_group ? PlanGroup::context_a2a : PlanGroup::context;
  auto add = [&](CollectiveKind kind, bool overlapped) { out.push_back({kind, group, op.comm_bytes, 1, overlapped}); };
  switch (op.context) {
    case ContextComm::a2a: add(CollectiveKind::all_to_all, false); break;
    case ContextComm::p2p:
    case ContextComm::allgather:
    case ContextComm::a2a_p2p: {
      const bool ring = op.context != ContextComm::allgather;
      add(CollectiveKind::all_gather, ring);
      if (!forward) add(CollectiveKind::reduce_scatter, ring);
      break;
    }
  }
}

}  // namespace

std::vector<TensorCollective> tensor_collectives(const LayerPlan& plan, PlanPass pass, Checkpointing policy) {
  std::vector<TensorCollective> out;
  const bool by_module = policy == Checkpointing::selective;  // the recomputed modules' edges
  if (pass == PlanPass::recompute && policy != Checkpointing::full && !by_module) return out;
  const bool forward = pass != PlanPass::backward;
  auto visit = [&](const PlanOp& op) {
    if (pass == PlanPass::recompute && by_module && !op.selective_recompute) return;
    if (op.kind == PlanOpKind::tensor_comm) conjugate_collectives(op, forward, out);
    if (op.kind == PlanOpKind::expert_comm) {
      // The experts' tensor group gathers the dispatched tokens and reduce-scatters the
      // results (each the other backward); the expert group's all-to-alls run once in each
      // pass.
      // (The allgather dispatcher's gather and scatter run over the expert block likewise.)
      const bool block = op.role == PlanOpRole::token_gather || op.role == PlanOpRole::token_scatter;
      const bool gather = op.role == PlanOpRole::expert_gather || op.role == PlanOpRole::token_gather;
      const bool scatter = op.role == PlanOpRole::expert_scatter || op.role == PlanOpRole::token_scatter;
      const CollectiveKind kind = !gather && !scatter    ? CollectiveKind::all_to_all
                                  : gather == forward     ? CollectiveKind::all_gather
                                                          : CollectiveKind::reduce_scatter;
      const PlanGroup group = block ? PlanGroup::expert_block : gather || scatter ? PlanGroup::expert_tensor : PlanGroup::expert;
      out.push_back({kind, group, op.comm_bytes, 1, op.comm_beside_gemm});
    }
    if (op.kind == PlanOpKind::context_comm) context_collectives(op, forward, out);
  };
  if (forward) {
    for (const PlanOp& op : plan.ops) visit(op);
  } else {
    for (auto it = plan.ops.rbegin(); it != plan.ops.rend(); ++it) visit(*it);
  }
  return out;
}

void add_folded(std::vector<TensorCollective>& into, TensorCollective c, int times) {
  if (times <= 0) return;
  c.count *= times;
  for (TensorCollective& o : into)
    if (o.kind == c.kind && o.group == c.group && o.bytes == c.bytes && o.overlapped == c.overlapped) {
      o.count += c.count;
      return;
    }
  into.push_back(c);
}

}  // namespace partune
