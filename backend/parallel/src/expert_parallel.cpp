// A mixture of experts' MLP over an expert-parallel group (expert_parallel.hpp).
#include "partune/backend/expert_parallel.hpp"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "partune/costmodel/collective.hpp"

namespace partune::backend {

namespace {

constexpr int kAllToAll = static_cast<int>(CollectiveKind::all_to_all);
static_assert(kAllToAll < TensorCalls::kKinds);

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group travels to backward as its address (as f / g do, tensor_parallel.cpp): the
// module that owns it outlives every graph built from its forward.
struct Exchange : public torch::autograd::Function<Exchange> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& t, std::int64_t group) {
    ctx->saved_data["group"] = group;
    return reinterpret_cast<ExpertParallelGroup*>(group)->exchange(t);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    auto* group = reinterpret_cast<ExpertParallelGroup*>(ctx->saved_data["group"].toInt());
    return {group->exchange(grad_outputs[0]), torch::Tensor()};
  }
};

bool parallel(const ExpertParallel& ep) { return ep && ep->degree() > 1; }
int degree_of(const TensorParallel& tp) { return tp ? tp->degree() : 1; }

}  // namespace

ExpertParallelGroup::ExpertParallelGroup(CommBackendPtr group, int degree, int rank, TensorParallel folded_tensor)
    : group_(std::move(group)), degree_(degree), rank_(rank), folded_tensor_(std::move(folded_tensor)) {
  if (degree < 1 || rank < 0 || rank >= degree)
    throw std::invalid_argument("ExpertParallelGroup: rank " + std::to_string(rank) + " of degree " +
                                std::to_string(degree));
  if (degree > 1 && (!group_ || group_->getSize() != degree || group_->getRank() != rank))
    throw std::invalid_argument("ExpertParallelGroup: the process group is not rank " + std::to_string(rank) + " of " +
                                std::to_string(degree));
}

torch::Tensor ExpertParallelGroup::exchange(const torch::Tensor& t) {
  if (degree_ == 1) return t;
  if (t.size(0) % degree_ != 0)
    throw std::invalid_argument("expert exchange: dimension 0 (" + std::to_string(t.size(0)) +
                                ") does not split into " + std::to_string(degree_) + " blocks");
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor out = all_to_all_equal_blocks(group_, t);
  tally_.calls[kAllToAll] += 1;
  tally_.seconds[kAllToAll] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

TensorCalls ExpertParallelGroup::take_tally() {
  TensorCalls calls = tally_.take();
  if (folded_tensor_) calls += folded_tensor_->take_tally();
  return calls;
}

torch::Tensor expert_exchange(const torch::Tensor& t, const ExpertParallel& ep) {
  if (!parallel(ep)) return t;
  return Exchange::apply(t, reinterpret_cast<std::int64_t>(ep.get()));
}

ExpertMLPImpl::ExpertMLPImpl(const ExpertShape& s, TensorParallel tp, ExpertParallel ep,
                             const LayerConjugates& conjugates)
    : shape(s), tp_(std::move(tp)), ep_(std::move(ep)), conjugates_(conjugates) {
  experts_tp_ = ep_ && ep_->folded_tensor() ? ep_->folded_tensor() : tp_;
  own_tokens_ = conjugates_.experts_route_shard || degree_of(tp_) == 1;
  if (experts_tp_ != tp_ && !own_tokens_)
    throw std::invalid_argument("ExpertMLP: MoE parallel folding with every tensor rank routing the whole micro-batch "
                                "(the layer plan routes each rank's sequence shard with it)");
  const int e = ep_ ? ep_->degree() : 1, et = degree_of(experts_tp_), t = degree_of(tp_);
  if (s.experts < 2 || s.experts % e != 0)
    throw std::invalid_argument("ExpertMLP: the expert degree " + std::to_string(e) + " does not divide " +
                                std::to_string(s.experts) + " experts");
  if (s.expert_ffn_hidden % et != 0)
    throw std::invalid_argument("ExpertMLP: the experts' tensor degree " + std::to_string(et) +
                                " does not divide expert_ffn_hidden " + std::to_string(s.expert_ffn_hidden));
  local_experts = s.experts / e;
  const std::int64_t f = s.expert_ffn_hidden / et, f1 = (s.swiglu ? 2 : 1) * f;
  router = register_parameter("router", torch::zeros({s.experts, s.hidden}));
  fc1 = register_parameter("fc1", torch::zeros({local_experts, f1, s.hidden}));
  fc2 = register_parameter("fc2", torch::zeros({local_experts, s.hidden, f}));
  if (s.bias) {
    fc1_bias = register_parameter("fc1_bias", torch::zeros({local_experts, f1}));
    fc2_bias = register_parameter("fc2_bias", torch::zeros({local_experts, s.hidden}));
  }
  if (s.shared_ffn_hidden > 0) {
    if (s.shared_ffn_hidden % t != 0)
      throw std::invalid_argument("ExpertMLP: the tensor degree " + std::to_string(t) +
                                  " does not divide shared_expert_ffn_hidden " + std::to_string(s.shared_ffn_hidden));
    const std::int64_t fs = s.shared_ffn_hidden / t, fs1 = (s.swiglu ? 2 : 1) * fs;
    shared_fc1 = register_parameter("shared_fc1", torch::zeros({fs1, s.hidden}));
    shared_fc2 = register_parameter("shared_fc2", torch::zeros({s.hidden, fs}));
    if (s.bias) {
      shared_fc1_bias = register_parameter("shared_fc1_bias", torch::zeros({fs1}));
      shared_fc2_bias = register_parameter("shared_fc2_bias", torch::zeros({s.hidden}));
    }
  }
}

std::int64_t ExpertMLPImpl::capacity(std::int64_t tokens) const {
  const double even = shape.capacity_factor * shape.experts_per_token * tokens / shape.experts;
  return std::min<std::int64_t>(tokens, static_cast<std::int64_t>(std::ceil(even - 1e-9)));
}

// The rank's experts on their rows: [local, R, hidden] -> [local, R, hidden] (this
// tensor rank's partial sums).
torch::Tensor ExpertMLPImpl::experts_forward(const torch::Tensor& rows) {
  torch::Tensor up = torch::bmm(rows, fc1.transpose(1, 2));
  if (fc1_bias.defined()) up = up + fc1_bias.unsqueeze(1);
  torch::Tensor act;
  if (shape.swiglu) {
    const std::int64_t f = up.size(2) / 2;
    act = torch::silu(up.narrow(2, 0, f)) * up.narrow(2, f, f);  // [gate | up]
  } else {
    act = torch::gelu(up);
  }
  torch::Tensor out = torch::bmm(act, fc2.transpose(1, 2));
  const bool first_tensor_rank = !experts_tp_ || experts_tp_->rank() == 0;
  if (fc2_bias.defined() && first_tensor_rank) out = out + fc2_bias.unsqueeze(1);
  return out;
}

// The shared experts from fc1's output: this tensor rank's partial sums (fc2's bias on
// tensor rank 0 only, as the experts').
torch::Tensor ExpertMLPImpl::shared_forward(const torch::Tensor& up) {
  const std::int64_t f = up.size(-1) / 2;
  const torch::Tensor act = shape.swiglu ? torch::silu(up.narrow(-1, 0, f)) * up.narrow(-1, f, f) : torch::gelu(up);
  torch::Tensor out = torch::matmul(act, shared_fc2.t());
  if (shared_fc2_bias.defined() && (!tp_ || tp_->rank() == 0)) out = out + shared_fc2_bias;
  return out;
}

// Routing: the k largest logits, weighted by their softmax; each copy's place in its
// expert's queue (token order), those within capacity kept. Dispatch: [E C, h] in expert
// order, block r holding rank r's experts; with Megatron's way the experts' tensor group
// gathers its members' rows (dimension 1 of [local, rows, h]) and reduce-scatters the
// results. Combine: back to the ranks the rows came from, weighted and summed per token.
torch::Tensor ExpertMLPImpl::routed_forward(const torch::Tensor& tokens) {
  const std::int64_t h = shape.hidden, E = shape.experts, k = shape.experts_per_token;
  const std::int64_t N = tokens.size(0), C = capacity(N);
  const torch::Tensor logits = torch::matmul(tokens, router.t());
  const auto top = logits.topk(k, -1);
  const torch::Tensor weights = torch::softmax(std::get<0>(top), -1).reshape({-1});  // [N k]
  const torch::Tensor chosen = std::get<1>(top).reshape({-1});                       // [N k]
  const torch::Tensor one_hot = torch::one_hot(chosen, E);
  const torch::Tensor place = (one_hot.cumsum(0) - 1).gather(1, chosen.unsqueeze(1)).squeeze(1);
  const torch::Tensor kept = (place < C).nonzero().squeeze(1);
  const torch::Tensor slot = (chosen * C + place).index_select(0, kept);  // row in [E C]
  const torch::Tensor token = kept.div(k, "floor");                         // its token
  const torch::Tensor rows = tokens.index_select(0, token);
  const torch::Tensor buffer = torch::zeros({E * C, h}, tokens.options()).index_add(0, slot, rows);
  const int e = ep_ ? ep_->degree() : 1;
  const torch::Tensor received = expert_exchange(buffer.view({e, local_experts * C * h}), ep_);
  // [source, local, C, h] -> [local, source C, h]: each expert's rows from every rank.
  const torch::Tensor mine =
      received.view({e, local_experts, C, h}).permute({1, 0, 2, 3}).reshape({local_experts, e * C, h});
  const torch::Tensor done = own_tokens_ ? leave_region(experts_forward(gather_sequence(mine, experts_tp_)),
                                                    Conjugate::sp_scatter, experts_tp_)
                                     : experts_forward(mine);
  const torch::Tensor back = done.view({local_experts, e, C, h}).permute({1, 0, 2, 3}).reshape({e, local_experts * C * h});
  const torch::Tensor results = expert_exchange(back, ep_).view({E * C, h});
  const torch::Tensor weighted = results.index_select(0, slot) * weights.index_select(0, kept).unsqueeze(1);
  return torch::zeros({N, h}, tokens.options()).index_add(0, token, weighted);
}

torch::Tensor ExpertMLPImpl::forward(const torch::Tensor& x) {
  const std::int64_t h = shape.hidden;
  if (own_tokens_) {
    // Megatron's way: the routed experts on the tokens this rank holds; the shared experts
    // (if any) in a region of their own, its edges the plan's mlp_in and mlp_out.
    const torch::Tensor out = routed_forward(x.reshape({-1, h})).view(x.sizes());
    if (!shared_fc1.defined()) return out;
    torch::Tensor up;
    if (conjugates_.mlp_in == Conjugate::sp_gather) {
      up = enter_region(x, shared_fc1, shared_fc1_bias, Conjugate::sp_gather, tp_);
    } else {
      up = torch::matmul(copy_to_tensor_region(x, tp_), shared_fc1.t());
      if (shared_fc1_bias.defined()) up = up + shared_fc1_bias;
    }
    return out + leave_region(shared_forward(up), conjugates_.mlp_out, tp_);
  }
  if (conjugates_.mlp_in != Conjugate::f)
    throw std::invalid_argument("ExpertMLP: a region entry other than f before the router");
  const torch::Tensor input = copy_to_tensor_region(x, tp_);  // f: mlp_in
  const torch::Tensor tokens = input.reshape({-1, h});
  torch::Tensor out = routed_forward(tokens);
  if (shared_fc1.defined()) {
    torch::Tensor up = torch::matmul(tokens, shared_fc1.t());
    if (shared_fc1_bias.defined()) up = up + shared_fc1_bias;
    out = out + shared_forward(up);
  }
  return leave_region(out.view(input.sizes()), conjugates_.mlp_out, tp_);  // g: mlp_out
}

}  // namespace partune::backend
