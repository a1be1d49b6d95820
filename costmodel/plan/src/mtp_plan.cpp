// A multi-token-prediction depth (DeepSeek-V3 §2.2; Megatron-core's
// MultiTokenPredictionLayer in transformer/multi_token_prediction.py), appended to the
// head plan (layer_plan.hpp): the MTP layers sit with the loss on the head's stage. Units
// as layer_plan.cpp's.
//
// One depth on one tensor rank:
//   the shifted tokens through the shared embedding (a lookup and its vocabulary-parallel
//   sum, as the embedding plan's, without parameters: the table is the embedding's);
//   enorm(embedding) and hnorm(hidden state) over the rank's sequence tokens, concatenated
//   to 2h; eh_proj, a column-parallel 2h -> h/t GEMM without bias (its 2h-wide input
//   entering the region as any column-parallel GEMM's: f, or sequence parallelism's
//   all-gather); gather_from_tensor_model_parallel_region (all-gather of the output
//   columns forward, a split backward) and, with sequence parallelism,
//   scatter_to_sequence_parallel_region (a split forward, all-gather backward);
//   one transformer layer of the last layer's kind (layer_plan: tensor-, sequence-,
//   context- and expert-parallel like the others);
//   its final norm and the shared output head with its own cross-entropy (head_ops over
//   the shared projection: the final norm's parameters are the depth's own). The loss
//   scaling factor is a multiplication of a scalar: no cost.
#include "plan_builder.hpp"

namespace partune::detail {

namespace {

// The lookup of the shifted tokens in the shared table (rotary or learned positions alike:
// Megatron's embedding adds its position table here too, read as the main lookup reads it).
void mtp_lookup(PlanBuilder& p) {
  const double eb = p.element_bytes(), T = p.tokens, h = p.m.hidden;
  const bool learned = p.m.positions == PositionKind::learned;
  PlanOp lookup;
  lookup.role = PlanOpRole::mtp_embedding;
  lookup.kind = PlanOpKind::memory_bound;
  lookup.forward_work.add(KernelClass::elementwise, (learned ? 2.0 : 1.0) * T * h * eb, 1);
  lookup.backward_work.add(KernelClass::elementwise, (learned ? 3.0 : 2.0) * T * h * eb, 1);
  p.plan.ops.push_back(lookup);
  p.comm(PlanOpRole::mtp_embedding_out, p.exit(), p.activation_bytes());
}

// enorm and hnorm over the rank's Ts tokens (each reads and writes h a token and keeps its
// input) and their concatenation (reads both outputs, writes the 2h-wide input of eh_proj).
void mtp_norms(PlanBuilder& p) {
  const double eb = p.element_bytes(), Ts = p.seq_tokens, h = p.m.hidden;
  PassWork eager = eager_norm(p.m.norm, Ts * h, eb);
  eager.forward += eager.forward;
  eager.backward += eager.backward;
  eager.forward.add(KernelClass::copy, 4.0 * Ts * h * eb, 1);   // torch.cat: read 2h, write 2h
  eager.backward.add(KernelClass::copy, 4.0 * Ts * h * eb, 2);  // its gradient's two halves
  p.memory_bound(PlanOpRole::mtp_norms, 2 * 4.0 * Ts * h + 8.0 * Ts * h, 3, 2 * 2.0 * Ts * h, eager);
  p.holds_norm(h);
  p.holds_norm(h);
  p.shard_gradient(2 * norm_params(p.m));  // the two scales, on the sequence shard
}

// eh_proj and the edges after it.
void mtp_projection(PlanBuilder& p) {
  const double Ts = p.seq_tokens, h = p.m.hidden;
  // Its input is 2h wide: the entry's collectives move twice a hidden state.
  p.comm(PlanOpRole::mtp_projection_in, p.entry(), 2.0 * p.activation_bytes());
  p.gemm(PlanOpRole::mtp_projection, 2.0 * h, h / p.t, 2.0 * Ts * 2.0 * h, 0.0);
  p.comm(PlanOpRole::mtp_gather, Conjugate::gather, p.activation_bytes());
  if (p.c.sequence_parallel) p.comm(PlanOpRole::mtp_split, Conjugate::split, p.activation_bytes());
}

}  // namespace

void append_mtp_depth(LayerPlan& head, const ModelSpec& m, const PlanConfig& c) {
  PlanBuilder in(m, c, PlanPart::head);
  mtp_lookup(in);
  mtp_norms(in);
  mtp_projection(in);
  apply_op_checkpointing(in.plan, m, c.tensor_degree, bytes_per_element(c.precision));
  const LayerPlan layer = layer_plan(m, c, m.mtp_layer_has_experts());
  PlanBuilder out(m, c, PlanPart::head);
  head_ops(out, true);
  apply_op_checkpointing(out.plan, m, c.tensor_degree, bytes_per_element(c.precision));
  const LayerPlan* parts[] = {&in.plan, &layer, &out.plan};
  for (const LayerPlan* part : parts)
    head.ops.insert(head.ops.end(), part->ops.begin(), part->ops.end());
}

}  // namespace partune::detail
