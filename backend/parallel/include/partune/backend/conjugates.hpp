#pragma once
// The communication at the edges of the tensor-parallel regions, as the layer plan states
// it (costmodel/layer_plan.hpp: each region edge is a tensor_comm op with its Conjugate).
// The layers never choose between Megatron's f / g and sequence parallelism themselves:
// they apply the conjugate they were built with.
//
//   f           identity forward, all-reduce of the gradient backward
//   g           all-reduce forward, identity backward
//   sp_gather   all-gather of the sequence shards forward, reduce-scatter backward; the
//               column-parallel GEMM after it keeps only the shard of its input for
//               backward and all-gathers it again there for its weight gradient
//               (Megatron's LinearWithGradAccumulationAndAsyncCommunication), so the
//               layer stores 34sbh/t rather than more (Korthikanti et al. 2022)
//   sp_scatter  reduce-scatter forward (each rank keeps its sequence shard), all-gather
//               of the gradient backward
// Sequences are dimension 1 of [batch, seq, hidden]; rank r of t holds positions
// [r s/t, (r + 1) s/t).
#include <torch/torch.h>

#include "partune/backend/tensor_parallel.hpp"
#include "partune/costmodel/layer_plan.hpp"

namespace partune::backend {

// The conjugate at each region edge of the model, read from the layer plans.
struct LayerConjugates {
  Conjugate attention_in = Conjugate::f, attention_out = Conjugate::g;
  Conjugate mlp_in = Conjugate::f, mlp_out = Conjugate::g;
  Conjugate embedding_out = Conjugate::g, head_in = Conjugate::f;
  // The edges whose collectives run in chunks beside the GEMM they feed or follow
  // (PlanOp::comm_beside_gemm: tp_comm_overlap with sequence parallelism, a dense layer's
  // four edges and the head's entry; overlapped_linear.hpp). The embedding's exit, a layer
  // with experts' MLP edges and the latent attention's gathered latents stay blocking.
  struct BesideGemm {
    bool attention_in = false, attention_out = false, mlp_in = false, mlp_out = false, head_in = false;
  };
  BesideGemm beside_gemm;
  // A layer with experts routes the tokens its rank holds (Megatron's dispatcher path of
  // moe_layer_plan: no region entry before the router, the experts' tensor group gathering
  // the dispatched rows); else every tensor rank routes the whole micro-batch after mlp_in
  // (expert_parallel.hpp).
  bool experts_route_shard = false;

  // Megatron's sequence parallelism: every entry sp_gather, every exit sp_scatter.
  static LayerConjugates sequence_parallel();
  // Activations between the regions hold a sequence shard.
  bool splits_sequence() const { return embedding_out == Conjugate::sp_scatter; }
};

// The conjugates of `job`'s plans (plan_config(job); transformer_layer_plan, embedding_plan,
// head_plan): each edge's tensor_comm op by its role (PlanOpRole), a std::logic_error when
// a plan with a tensor group lacks one. Tensor degree 1 has no tensor group and no
// tensor_comm ops: the defaults (f / g), the identity there.
LayerConjugates layer_conjugates(const Job& job);

// Entering a column-parallel region: Y = conj(X) W^T + b, the GEMM with the conjugate
// `entry` (f or sp_gather) at its input. `bias` may be undefined. `beside_gemm` (sp_gather
// at degree > 1): the gather in chunks beside the GEMM (chunked_gather_linear).
torch::Tensor enter_region(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                           Conjugate entry, const TensorParallel& tp, bool beside_gemm = false);
// Leaving a row-parallel region (or the vocabulary-parallel embedding): conj(Y) with
// `exit` g or sp_scatter.
torch::Tensor leave_region(const torch::Tensor& y, Conjugate exit, const TensorParallel& tp);
// Leaving a row-parallel region from its GEMM: conj(X W^T) with `exit` g or sp_scatter.
// `beside_gemm` (sp_scatter at degree > 1): the GEMM chunk by chunk beside the
// reduce-scatter (chunked_linear_scatter); else project(), then leave_region.
torch::Tensor project_out_of_region(const torch::Tensor& x, const torch::Tensor& weight, Conjugate exit,
                                    const TensorParallel& tp, bool beside_gemm = false);

// sp_gather on its own (no GEMM fused): the rank-ordered sequence shards of `x` [b, s/t,
// ...] all-gathered forward; the gradient reduce-scattered back to shards. Multi-head
// latent attention gathers its latents with it.
torch::Tensor gather_sequence(const torch::Tensor& x, const TensorParallel& tp);

// This rank's part of a size-n sequence: [r n/t, (r + 1) n/t); the whole at degree 1.
Slice sequence_slice(std::int64_t n, const TensorParallel& tp);

}  // namespace partune::backend
