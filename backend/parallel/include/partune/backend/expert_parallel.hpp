#pragma once
// A mixture of experts' MLP and its expert-parallel group (the layer plan's
// moe_layer_plan: router, dispatch, the rank's experts, combine).
//
// Routing (Mixtral's): the router's logits [N, experts] for the N tokens of the
// micro-batch; each token goes to its experts_per_token largest, weighted by the softmax
// of those logits. GShard's capacity: each expert takes at most
// C = min(N, ceil(capacity_factor x experts_per_token x N / experts)) rows from each rank,
// in token order; a token's copy beyond that is dropped (its slot adds nothing). With
// capacity_factor = experts / experts_per_token, C = N and no token is ever dropped.
//
// Dispatch: each rank writes its copies into a [experts, C, hidden] buffer (zeros where
// unused) and exchanges it over the expert group in one all-to-all of equal blocks (the
// experts of rank i form block i); rank r receives [ep, experts / ep, C, hidden], runs
// each of its experts on the ep x C rows for it (one batched GEMM per matrix), and sends
// the results back the same way (combine), where each token sums its experts' rows times
// their weights. Two all-to-alls forward and two backward (the gradients go back the way
// the tokens came), as the program's expert instructions say.
//
// Tensor parallelism, as the layer plan's moe_layer_plan says (moe_plan.cpp), one of two
// ways (LayerConjugates::experts_route_shard):
//  - partune's own (no sequence parallelism, the experts' tensor group the tensor group):
//    every tensor rank routes the whole micro-batch after the plan's mlp_in (f); the
//    experts are split like the dense MLP (fc1's columns, fc2's rows, a SwiGLU fc1 as
//    [gate slice | up slice]) and mlp_out (g) sums the ranks' partial results;
//  - Megatron-Core's (sequence parallelism, or MoE parallel folding): each rank routes the
//    tokens it holds (its sequence shard), the dispatched rows are all-gathered over the
//    experts' own tensor group (expert_tensor, of expert_tensor_parallel_degree ranks:
//    the tensor group, or with folding the expert grid's, expert_grid.hpp), each expert
//    runs on its slice of the width, and the partial results are reduce-scattered back
//    before the combine; no region edge around the routed experts (shared experts keep
//    theirs: the plan's mlp_in / mlp_out around them alone).
// The router is whole on every rank (with Megatron's way each computes its gradient from
// its own tokens: a sequence-parallel parameter, summed over the tensor group). fc2's bias
// is added on the experts' tensor rank 0 only (the sum after it adds the partial results).
#include <cstdint>
#include <memory>

#include <torch/torch.h>
#include "partune/backend/torch_compat.hpp"

#include "partune/backend/conjugates.hpp"
#include "partune/backend/tensor_parallel.hpp"

namespace partune::backend {

class ExpertParallelGroup {
 public:
  ExpertParallelGroup() = default;  // degree 1: the exchange is the identity
  // `group` holds the `degree` ranks of this rank's expert group in data-coordinate order
  // (`rank`: this rank's place in it, which picks its experts). `folded_tensor`: under MoE
  // parallel folding (expert_tensor_parallel_degree other than the tensor degree), the
  // experts' own tensor group (the program's expert_tensor communicator; degree 1 when
  // each expert is whole on its rank); null when it is the tensor group.
  ExpertParallelGroup(CommBackendPtr group, int degree, int rank, TensorParallel folded_tensor = nullptr);
  int degree() const { return degree_; }
  int rank() const { return rank_; }
  const TensorParallel& folded_tensor() const { return folded_tensor_; }
  // All-to-all of equal blocks along dimension 0 (its size divisible by the degree):
  // block i goes to rank i, and block j of the result came from rank j. Blocking, timed,
  // counted (CollectiveKind::all_to_all in the tally).
  torch::Tensor exchange(const torch::Tensor& t);
  // The exchanges' tally, and the folded tensor group's gathers and reduce-scatters.
  TensorCalls take_tally();

 private:
  CommBackendPtr group_;
  int degree_ = 1, rank_ = 0;
  TensorParallel folded_tensor_;
  TensorCalls tally_;
};
using ExpertParallel = std::shared_ptr<ExpertParallelGroup>;  // null = degree 1

// exchange() with autograd: the backward exchanges the gradient (an equal-block
// all-to-all undoes itself).
torch::Tensor expert_exchange(const torch::Tensor& t, const ExpertParallel& ep);

// The sizes of a mixture of experts' MLP (from the ModelSpec the backend runs).
struct ExpertShape {
  std::int64_t hidden = 0, expert_ffn_hidden = 0, experts = 0, experts_per_token = 2;
  std::int64_t shared_ffn_hidden = 0;  // the shared experts' width (0: none)
  double capacity_factor = 1.0;
  bool swiglu = false, bias = true;
};

class ExpertMLPImpl : public torch::nn::Module {
 public:
  // Throws std::invalid_argument when the expert degree does not divide the experts or
  // the experts' tensor degree the expert width.
  ExpertMLPImpl(const ExpertShape& shape, TensorParallel tp = nullptr, ExpertParallel ep = nullptr,
                const LayerConjugates& conjugates = {});
  // [batch, seq, hidden] -> [batch, seq, hidden]
  torch::Tensor forward(const torch::Tensor& x);
  // Rows per expert and rank for N routed tokens.
  std::int64_t capacity(std::int64_t tokens) const;

  ExpertShape shape;
  std::int64_t local_experts = 0;  // experts / expert degree: this rank's
  torch::Tensor router;            // [experts, hidden], whole on every rank
  torch::Tensor fc1, fc2;          // [local, f1 / et, hidden], [local, hidden, f / et] (et: the experts' tensor degree)
  torch::Tensor fc1_bias, fc2_bias;  // [local, f1 / t], [local, hidden] (bias only)
  // Shared experts (shape.shared_ffn_hidden > 0): a dense MLP on every token, split over
  // the tensor group as the dense MLP is, inside the same region (its partial sums added
  // to the experts' before mlp_out): [fs1 / t, hidden], [hidden, fs / t] and biases
  // [fs1 / t], [hidden]; fs1 = 2 fs with SwiGLU ([gate slice | up slice]). Not experts':
  // their gradients go over the data-parallel group.
  torch::Tensor shared_fc1, shared_fc2, shared_fc1_bias, shared_fc2_bias;

 private:
  torch::Tensor experts_forward(const torch::Tensor& rows);  // [local, R, hidden]
  // Routing, dispatch, the rank's experts and the combine: [N, hidden] -> [N, hidden]
  // (with partune's own way, this tensor rank's partial sums).
  torch::Tensor routed_forward(const torch::Tensor& tokens);
  // The shared experts from fc1's output [..., fs1 / t]: partial sums [..., hidden].
  torch::Tensor shared_forward(const torch::Tensor& up);
  TensorParallel tp_;
  TensorParallel experts_tp_;  // the experts' tensor group: tp_, or ep_'s folded one
  bool own_tokens_ = false;    // Megatron's way: routes the tokens this rank holds
  ExpertParallel ep_;
  LayerConjugates conjugates_;
};
TORCH_MODULE(ExpertMLP);

}  // namespace partune::backend
