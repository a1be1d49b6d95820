// Norms, rotary positions, attention, MLP and the pre-norm layer (transformer_layer.hpp).
#include "partune/backend/transformer_layer.hpp"

#include "partune/kernels/flash_attention.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

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

// RMSNorm keeping its input alone (and the b x s inverse roots), as LayerNorm keeps only
// its input and statistics, the layer plan's norm: with r = (mean(x^2) + eps)^(-1/2) and
// g = dy w, dx = r g - x r^3 mean(g x) and dw = the sum over tokens of dy x r. Built in
// place: no more than two b x s x h temporaries besides the gradients.
struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w, double eps) {
    const torch::Tensor r = torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps);
    ctx->save_for_backward({x, w, r});
    return (x * r).mul_(w);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1], &r = saved[2], &dy = grad_outputs[0];
    torch::Tensor dx = dy * w;  // g
    const torch::Tensor mean_gx = (dx * x).mean(-1, /*keepdim=*/true);
    dx.mul_(r).sub_(x * (r.pow(3) * mean_gx));
    const torch::Tensor dw = (dy * x).mul_(r).reshape({-1, x.size(-1)}).sum(0);
    return {dx, dw, torch::Tensor()};
  }
};

// SwiGLU's silu(gate) * up over y = [gate | up], keeping y alone (Megatron's fused SwiGLU;
// the layer plan keeps both halves): with s = sigmoid(gate), d up = dout gate s and
// d gate = dout up s (1 + gate (1 - s)), written into the two halves of the gradient in
// place (one temporary, s).
struct SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& y) {
    ctx->save_for_backward({y});
    const std::int64_t f = y.size(-1) / 2;
    return torch::silu(y.narrow(-1, 0, f)).mul_(y.narrow(-1, f, f));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor y = ctx->get_saved_variables()[0], &dout = grad_outputs[0];
    const std::int64_t f = y.size(-1) / 2;
    const torch::Tensor gate = y.narrow(-1, 0, f), up = y.narrow(-1, f, f), s = torch::sigmoid(gate);
    torch::Tensor grad = torch::empty_like(y);
    torch::Tensor dgate = grad.narrow(-1, 0, f), dup = grad.narrow(-1, f, f);
    torch::mul_out(dup, gate, s).mul_(dout);
    // gate (1 - s) = gate - gate s
    torch::mul_out(dgate, gate, s).neg_().add_(gate).add_(1.0).mul_(s).mul_(up).mul_(dout);
    return {grad};
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

torch::Tensor windowed_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 std::int64_t window, const torch::Tensor& sinks) {
  const std::int64_t s = q.size(-2);
  const torch::Tensor i = torch::arange(s, torch::dtype(torch::kLong).device(q.device())).unsqueeze(1);
  const torch::Tensor j = i.transpose(0, 1);
  torch::Tensor masked = j > i;  // the future
  if (window > 0) masked = masked | (i - j >= window);  // beyond the window
  const torch::Tensor scores = (torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1))))
                                   .masked_fill(masked, -std::numeric_limits<float>::infinity());
  if (!sinks.defined()) return torch::matmul(torch::softmax(scores, -1), v);
  const auto sz = scores.sizes();
  const torch::Tensor sink = sinks.view({1, sz[1], 1, 1}).expand({sz[0], sz[1], sz[2], 1});
  const torch::Tensor p = torch::softmax(torch::cat({scores, sink}, -1), -1).narrow(-1, 0, s);
  return torch::matmul(p, v);
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

torch::Tensor swiglu(const torch::Tensor& y) { return SwiGluFunction::apply(y); }

NormImpl::NormImpl(std::int64_t hidden, NormKind kind_) : kind(kind_) {
  weight = register_parameter("weight", torch::empty({hidden}));
  if (kind == NormKind::layernorm) bias = register_parameter("bias", torch::empty({hidden}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  // LayerNorm as torch::nn::LayerNorm computes it (the numbers the GPT block always had).
  if (kind == NormKind::layernorm) return torch::layer_norm(x, {weight.size(0)}, weight, bias, kNormEps);
  return rms_norm(x, weight);
}

RotaryTables rotary_tables(std::int64_t positions, std::int64_t head_dim, double theta) {
  if (head_dim % 2 != 0)
    throw std::invalid_argument("rotary positions: head dim " + std::to_string(head_dim) + " is odd");
  // In double, then fp32: w_i = theta^(-2i/d), the angle of position p is p w_i.
  const torch::Tensor i = torch::arange(0, head_dim / 2, torch::kDouble);
  const torch::Tensor w = torch::pow(theta, -2.0 * i / static_cast<double>(head_dim));
  const torch::Tensor angles = torch::outer(torch::arange(0, positions, torch::kDouble), w);
  const torch::Tensor both = torch::cat({angles, angles}, -1);  // dimension i and i + d/2 share w_i
  return {both.cos().to(torch::kFloat), both.sin().to(torch::kFloat)};
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const std::int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

ParallelAttentionImpl::ParallelAttentionImpl(const ModelSpec& c, TensorParallel tp,
                                             const LayerConjugates& conjugates, ContextParallel cp,
                                             std::int64_t window_, bool flash)
    : hidden(c.hidden),
      heads(c.heads),
      kv_heads(c.kv_heads),
      flash_attention(flash),
      window(window_),
      cp_(cp && cp->degree() > 1 ? std::move(cp) : nullptr),
      seq_len_(c.seq_len) {
  if (cp_ && flash_attention)
    throw std::invalid_argument("ParallelAttention: context parallelism with FlashAttention is not run here");
  if ((window > 0 || c.attention_sinks) && (flash_attention || cp_))
    throw std::invalid_argument(std::string("ParallelAttention: ") + (window > 0 ? "a sliding window" : "attention sinks") +
                                " with " + (cp_ ? "context parallelism" : "FlashAttention") + " is not run here");
  if (heads <= 0 || (c.attention_head_dim <= 0 && hidden % heads != 0))
    throw std::invalid_argument("ParallelAttention: heads must divide hidden (or head_dim be set)");
  if (kv_heads <= 0 || heads % kv_heads != 0)
    throw std::invalid_argument("ParallelAttention: kv_heads " + std::to_string(kv_heads) + " must divide heads " +
                                std::to_string(heads));
  head_dim = c.head_dim();
  const std::int64_t queries = heads * head_dim;  // hidden unless head_dim is set apart
  const int t = tp ? tp->degree() : 1, r = tp ? tp->rank() : 0;
  local_heads = tensor_slice(heads, t, r, "heads").size;
  local_kv_heads = tensor_slice(kv_heads, t, r, "kv_heads").size;
  if (c.positions == PositionKind::rope) rotary = rotary_tables(c.seq_len, head_dim);
  qkv = register_module("qkv", ColumnParallelLinear(hidden, queries + 2 * kv_heads * head_dim, c.bias, tp,
                                                    conjugates.attention_in, conjugates.beside_gemm.attention_in));
  proj = register_module("proj", RowParallelLinear(queries, hidden, c.bias, tp, conjugates.attention_out,
                                                   conjugates.beside_gemm.attention_out));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", Norm(head_dim, NormKind::rmsnorm));
    k_norm = register_module("k_norm", Norm(head_dim, NormKind::rmsnorm));
  }
  if (c.attention_sinks) sinks = register_parameter("sinks", torch::zeros({local_heads}));
}

torch::Tensor ParallelAttentionImpl::forward(const torch::Tensor& x) {
  // The whole sequence: x may be a sequence shard that qkv's sp_gather completes. Local
  // [b, s, (local_heads + 2 local_kv_heads) d] -> q [b, local_heads, s, d] and k, v
  // [b, local_kv_heads, s, d] (the whole layer's rows are sliced per head to match:
  // GPTModel's initialisation).
  const torch::Tensor y = qkv(x);
  const std::int64_t b = y.size(0), s = y.size(1), d = head_dim;
  const auto heads_at = [&](std::int64_t first, std::int64_t n) {
    return y.narrow(-1, first * d, n * d).view({b, s, n, d}).permute({0, 2, 1, 3});
  };
  torch::Tensor q = heads_at(0, local_heads), k = heads_at(local_heads, local_kv_heads),
                v = heads_at(local_heads + local_kv_heads, local_kv_heads);
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  if (rotary.cos.defined()) {
    // The tables follow the model to its device and format (made on the CPU in fp32).
    if (rotary.cos.device() != y.device() || rotary.cos.scalar_type() != y.scalar_type())
      rotary = {rotary.cos.to(y.options()), rotary.sin.to(y.options())};
    // The rank's positions: the first s, or with context parallelism its chunks'.
    torch::Tensor cos = rotary.cos.narrow(0, 0, s), sin = rotary.sin.narrow(0, 0, s);
    if (cp_) {
      const torch::Tensor at = cp_->positions(seq_len_).to(y.device());
      cos = rotary.cos.index_select(0, at);
      sin = rotary.sin.index_select(0, at);
    }
    q = apply_rotary(q, cos, sin);
    k = apply_rotary(k, cos, sin);
  }
  if (cp_) {
    const torch::Tensor ctx = context_attention(q, k, v, seq_len_, cp_);
    return proj(ctx.permute({0, 2, 1, 3}).reshape({b, s, local_heads * d}));
  }
  // Each key/value head serves heads / kv_heads consecutive query heads: repeated for them
  // (their gradients summed back in backward).
  if (local_kv_heads < local_heads) {
    k = k.repeat_interleave(local_heads / local_kv_heads, 1);
    v = v.repeat_interleave(local_heads / local_kv_heads, 1);
  }
  // FlashAttention keeps no scores, so selective recomputation has nothing of it to recompute.
  const torch::Tensor ctx = window > 0 || sinks.defined() ? windowed_attention(q, k, v, window, sinks)
                            : flash_attention             ? kernels::fused_attention(q, k, v, true)
                                                          : causal_attention(q, k, v);
  // The local heads' context is this rank's column block of proj's input.
  return proj(ctx.permute({0, 2, 1, 3}).reshape({b, s, local_heads * d}));
}

ParallelMLPImpl::ParallelMLPImpl(const ModelSpec& c, TensorParallel tp, const LayerConjugates& conjugates)
    : gated(c.mlp == MlpKind::swiglu) {
  const std::int64_t columns = gated ? 2 * c.ffn_hidden : c.ffn_hidden;
  fc1 = register_module("fc1", ColumnParallelLinear(c.hidden, columns, c.bias, tp, conjugates.mlp_in,
                                                    conjugates.beside_gemm.mlp_in));
  fc2 = register_module("fc2", RowParallelLinear(c.ffn_hidden, c.hidden, c.bias, tp, conjugates.mlp_out,
                                                 conjugates.beside_gemm.mlp_out));
}

torch::Tensor ParallelMLPImpl::forward(const torch::Tensor& x) {
  // With SwiGLU fc1's local output is this rank's ffn columns of both: [gate_i | up_i].
  return fc2(gated ? swiglu(fc1(x)) : torch::gelu(fc1(x)));
}

TransformerLayerImpl::TransformerLayerImpl(const ModelSpec& c, TensorParallel tp,
                                           const LayerConjugates& conjugates, bool moe, ExpertParallel ep,
                                           ContextParallel cp, std::int64_t window, bool flash_attention) {
  ln1 = register_module("ln1", Norm(c.hidden, c.norm));
  if (c.attention == AttentionKind::mla && cp && cp->degree() > 1)
    throw std::invalid_argument("context parallelism around multi-head latent attention is not run by the backend");
  if (c.attention == AttentionKind::mla)
    latent = register_module("attention", LatentAttention(c, tp, conjugates, flash_attention));
  else
    attention = register_module("attention", ParallelAttention(c, tp, conjugates, std::move(cp), window, flash_attention));
  ln2 = register_module("ln2", Norm(c.hidden, c.norm));
  if (moe) {
    ExpertShape shape;
    shape.hidden = c.hidden;
    shape.expert_ffn_hidden = c.expert_ffn_hidden;
    shape.shared_ffn_hidden = c.shared_expert_ffn_hidden;
    shape.experts = c.experts;
    shape.experts_per_token = c.experts_per_token;
    shape.capacity_factor = c.capacity_factor;
    shape.swiglu = c.mlp == MlpKind::swiglu;
    shape.bias = c.bias;
    experts = register_module("experts", ExpertMLP(shape, tp, std::move(ep), conjugates));
  } else {
    mlp = register_module("mlp", ParallelMLP(c, tp, conjugates));
  }
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& x) {
  const torch::Tensor h = x + (latent ? latent(ln1(x)) : attention(ln1(x)));
  return h + (experts ? experts(ln2(h)) : mlp(ln2(h)));
}

}  // namespace partune::backend
