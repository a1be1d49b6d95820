// Attention, MLP and the pre-LN layer (transformer_layer.hpp).
#include "partune/backend/transformer_layer.hpp"

#include "partune/kernels/flash_attention.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace partune::backend {

namespace F = torch::nn::functional;

namespace {

// softmax(Q K^T / sqrt(d)) under the causal mask: [b, heads, s, s].
torch::Tensor causal_probabilities(const torch::Tensor& q, const torch::Tensor& k) {
  return kernels::attention_probabilities(q, k, true);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local SelectiveRecompute* active_scope = nullptr;

// The attention core keeping Q, K, V only. Its registered CheckpointedAttention travels to
// backward as a raw address in ctx->saved_data (an IValue holds no C++ object); the
// SelectiveRecompute that owns it outlives the graph (see the class).
struct CheckpointedCore : public torch::autograd::Function<CheckpointedCore> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, std::int64_t core) {
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["core"] = core;
    return torch::matmul(causal_probabilities(q, k), v);  // the probabilities are freed here
  }
  // With P the probabilities and O = P V: dV = P^T dO; dP = dO V^T; the softmax's
  // dS = P (dP - rowsum(dP P)) (0 where masked: P is 0 there); dQ = dS K / sqrt(d),
  // dK = dS^T Q / sqrt(d).
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &dout = grad_outputs[0];
    auto* core = reinterpret_cast<CheckpointedAttention*>(ctx->saved_data["core"].toInt());
    torch::Tensor p = core->probs.defined() ? core->probs : causal_probabilities(q, k);
    core->probs = torch::Tensor();
    const torch::Tensor dp = torch::matmul(dout, v.transpose(-2, -1));
    const torch::Tensor ds = p * (dp - (dp * p).sum(-1, /*keepdim=*/true)) / std::sqrt(static_cast<double>(q.size(-1)));
    return {torch::matmul(ds, k), torch::matmul(ds.transpose(-2, -1), q), torch::matmul(p.transpose(-2, -1), dout),
            torch::Tensor()};
  }
};

}  // namespace

SelectiveRecompute::Scope::Scope(SelectiveRecompute& into) : previous_(active_scope) { active_scope = &into; }
SelectiveRecompute::Scope::~Scope() { active_scope = previous_; }
SelectiveRecompute* SelectiveRecompute::active() { return active_scope; }

CheckpointedAttention& SelectiveRecompute::add() {
  cores_.push_back(std::make_unique<CheckpointedAttention>());
  return *cores_.back();
}

void SelectiveRecompute::recompute() {
  torch::NoGradGuard no_grad;
  for (auto& core : cores_) core->probs = causal_probabilities(core->q, core->k);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  SelectiveRecompute* scope = SelectiveRecompute::active();
  if (!scope || !torch::GradMode::is_enabled()) return torch::matmul(causal_probabilities(q, k), v);
  CheckpointedAttention& core = scope->add();
  core.q = q.detach();
  core.k = k.detach();
  core.v = v.detach();
  return CheckpointedCore::apply(q, k, v, reinterpret_cast<std::int64_t>(&core));
}

ParallelAttentionImpl::ParallelAttentionImpl(std::int64_t hidden_, std::int64_t heads_, TensorParallel tp,
                                             const LayerConjugates& conjugates, bool flash)
    : hidden(hidden_), heads(heads_), flash_attention(flash) {
  if (heads <= 0 || hidden % heads != 0) throw std::invalid_argument("ParallelAttention: heads must divide hidden");
  local_heads = tensor_slice(heads, tp ? tp->degree() : 1, tp ? tp->rank() : 0, "heads").size;
  qkv = register_module("qkv", ColumnParallelLinear(hidden, 3 * hidden, true, tp, conjugates.attention_in));
  proj = register_module("proj", RowParallelLinear(hidden, hidden, true, tp, conjugates.attention_out));
}

torch::Tensor ParallelAttentionImpl::forward(const torch::Tensor& x) {
  // Local [b, s, 3 local_heads d] -> [b, s, 3, local_heads, d] -> three [b, local_heads, s, d]
  // (the whole layer's rows are sliced per head to match: GPTModel's initialisation). The
  // whole sequence: x may be a sequence shard that qkv's sp_gather completes.
  const torch::Tensor qkv_whole = qkv(x);
  const std::int64_t b = qkv_whole.size(0), s = qkv_whole.size(1), d = hidden / heads;
  const torch::Tensor qkv_out = qkv_whole.view({b, s, 3, local_heads, d}).permute({2, 0, 3, 1, 4});
  // [b, local_heads, s, d]; FlashAttention keeps no scores, so selective recomputation has
  // nothing of it to recompute.
  const torch::Tensor ctx = flash_attention ? kernels::flash_attention(qkv_out[0], qkv_out[1], qkv_out[2], true)
                                            : causal_attention(qkv_out[0], qkv_out[1], qkv_out[2]);
  // The local heads' context is this rank's column block of proj's input.
  return proj(ctx.permute({0, 2, 1, 3}).reshape({b, s, local_heads * d}));
}

ParallelMLPImpl::ParallelMLPImpl(std::int64_t hidden, std::int64_t ffn_hidden, TensorParallel tp,
                                 const LayerConjugates& conjugates) {
  fc1 = register_module("fc1", ColumnParallelLinear(hidden, ffn_hidden, true, tp, conjugates.mlp_in));
  fc2 = register_module("fc2", RowParallelLinear(ffn_hidden, hidden, true, tp, conjugates.mlp_out));
}

torch::Tensor ParallelMLPImpl::forward(const torch::Tensor& x) { return fc2(torch::gelu(fc1(x))); }

TransformerLayerImpl::TransformerLayerImpl(std::int64_t hidden, std::int64_t heads, std::int64_t ffn_hidden,
                                           TensorParallel tp, const LayerConjugates& conjugates, bool flash) {
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(kLayerNormEps)));
  attention = register_module("attention", ParallelAttention(hidden, heads, tp, conjugates, flash));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden}).eps(kLayerNormEps)));
  mlp = register_module("mlp", ParallelMLP(hidden, ffn_hidden, tp, conjugates));
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& x) {
  const torch::Tensor h = x + attention(ln1(x));
  return h + mlp(ln2(h));
}

}  // namespace partune::backend
