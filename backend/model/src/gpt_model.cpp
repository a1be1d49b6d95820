// The GPT decoder and its tensor-parallel shards (gpt_model.hpp).
#include "partune/backend/gpt_model.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>

namespace partune::backend {

namespace {

int degree_of(const TensorParallel& tp) { return tp ? tp->degree() : 1; }
int rank_of(const TensorParallel& tp) { return tp ? tp->rank() : 0; }

// The vocabulary rows [begin, begin + size) this rank holds of the token embedding, the
// untied LM head and the logits.
Slice vocab_slice(const ModelSpec& c, const TensorParallel& tp) {
  return tensor_slice(c.vocab, degree_of(tp), rank_of(tp), "vocab");
}

std::string layer_key(int i) { return std::to_string(i); }

// ---- initialisation: the whole model's values, this shard's slices -------------------

enum class Init { normal, residual, one, zero };

// One parameter of the whole (unsharded) model: how it is initialised, its whole shape,
// and where this shard keeps which part of it (`held` undefined: not held).
struct WholeParameter {
  Init init;
  std::vector<std::int64_t> shape;
  torch::Tensor held;
  std::function<torch::Tensor(const torch::Tensor&)> part;  // whole value -> the held slice
};

torch::Tensor whole(const torch::Tensor& t) { return t; }
std::function<torch::Tensor(const torch::Tensor&)> rows(Slice s) {
  return [s](const torch::Tensor& t) { return t.narrow(0, s.begin, s.size); };
}
std::function<torch::Tensor(const torch::Tensor&)> columns(Slice s) {
  return [s](const torch::Tensor& t) { return t.narrow(1, s.begin, s.size); };
}
// The rows of a fused weight (or bias) made of blocks side by side that this rank keeps:
// each part is rows [begin, begin + size) of the whole tensor, kept in the order given.
std::function<torch::Tensor(const torch::Tensor&)> block_rows(std::vector<Slice> parts) {
  return [parts](const torch::Tensor& t) {
    std::vector<torch::Tensor> kept;
    for (const Slice& p : parts) kept.push_back(t.narrow(0, p.begin, p.size));
    return torch::cat(kept, 0);
  };
}
// The fused QKV weight [h + 2 kv d, h] (or bias) is [q; k; v]: q [h, h] with query head j at
// rows j d .. (j + 1) d - 1, then k and v [kv d, h] each, key/value head j at j d there.
// The local layer's output is [q | k | v] of its heads, so its rows are the rank's query
// heads of q, then its key/value heads of k, then of v.
std::function<torch::Tensor(const torch::Tensor&)> qkv_rows(const ModelSpec& c, Slice heads, Slice kv_heads) {
  const std::int64_t d = c.head_dim(), h = c.query_width(), kv = std::int64_t{c.kv_heads} * d;
  return block_rows({{heads.begin * d, heads.size * d},
                     {h + kv_heads.begin * d, kv_heads.size * d},
                     {h + kv + kv_heads.begin * d, kv_heads.size * d}});
}
// fc1's rows: its ffn slice; with SwiGLU fc1 is [gate; up] ([2 ffn, h]), and the rank's
// rows are its slice of the gate, then of up (its local output [gate_i | up_i]).
std::function<torch::Tensor(const torch::Tensor&)> fc1_rows(const ModelSpec& c, Slice ffn) {
  if (c.mlp != MlpKind::swiglu) return rows(ffn);
  return block_rows({ffn, {c.ffn_hidden + ffn.begin, ffn.size}});
}

// ---- vocabulary-parallel cross-entropy ------------------------------------------------

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Mean over the N tokens of log(sum_v exp z_v) - z_target, with each rank holding the
// logits of its vocabulary slice [begin, begin + V/t): the maximum (for stability), the
// sum of exponentials and the target logit are each all-reduced, so every rank gets the
// whole loss without the whole logits. The group travels as its address, as in f / g
// (tensor_parallel.cpp): the model that owns it outlives the graph.
struct VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& targets,
                               std::int64_t group_address, std::int64_t vocab_begin) {
    TensorParallelGroup& group = *reinterpret_cast<TensorParallelGroup*>(group_address);
    const std::int64_t local_vocab = logits.size(-1);
    torch::Tensor max = std::get<0>(logits.max(-1));  // [N]
    group.all_reduce_max(max);
    const torch::Tensor shifted = logits - max.unsqueeze(-1);
    torch::Tensor exp = shifted.exp();
    torch::Tensor sum_exp = exp.sum(-1);
    group.all_reduce_sum(sum_exp);
    // Only the rank whose slice holds the target contributes its logit; the others add 0.
    const torch::Tensor outside = (targets < vocab_begin) | (targets >= vocab_begin + local_vocab);
    const torch::Tensor local_target = (targets - vocab_begin).masked_fill(outside, 0);
    torch::Tensor target_logit =
        shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0).contiguous();
    group.all_reduce_sum(target_logit);
    const torch::Tensor loss = (sum_exp.log() - target_logit).mean();
    exp.div_(sum_exp.unsqueeze(-1));  // now the softmax over the whole vocabulary, local columns
    ctx->save_for_backward({exp, local_target, outside});
    return loss;
  }

  // d loss / d z_v = (softmax_v - [v = target]) / N: purely local, no collective.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& softmax = saved[0];
    const torch::Tensor& local_target = saved[1];
    const torch::Tensor& outside = saved[2];
    torch::Tensor grad = softmax.clone();  // the saved softmax stays intact for a retained graph
    const torch::Tensor one_hot = (~outside).to(grad.scalar_type()).unsqueeze(-1);
    grad.scatter_add_(-1, local_target.unsqueeze(-1), -one_hot);
    grad.mul_(grad_outputs[0] / static_cast<double>(softmax.size(0)));
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                           const TensorParallel& tp) {
  const torch::Tensor z = logits.reshape({-1, logits.size(-1)});
  const torch::Tensor y = targets.reshape({-1});
  // Degree 1: the whole logits are here; LibTorch's own cross-entropy (the numbers the
  // single-rank backend has always produced).
  if (degree_of(tp) == 1) return torch::nn::functional::cross_entropy(z, y);
  const std::int64_t begin = static_cast<std::int64_t>(tp->rank()) * z.size(-1);
  return VocabParallelCrossEntropy::apply(z, y, reinterpret_cast<std::int64_t>(tp.get()), begin);
}

namespace {

// This rank's slices of the split dimensions.
struct Parts {
  Slice heads, kv_heads;
  Slice queries;  // the rank's query columns: its heads x head_dim (proj's input)
  Slice ffn, vocab;
  Slice expert_ffn;           // of each expert's width
  Slice shared_ffn;           // of the shared experts' width
  const ExpertParallelGroup* expert = nullptr;  // picks the rank's experts (null: all)
};

// A norm's scale (1) and, for LayerNorm, its shift (0); `held` null when not held.
void add_norm(std::vector<WholeParameter>& all, const ModelSpec& c, const NormImpl* held) {
  all.push_back({Init::one, {c.hidden}, held ? held->weight : torch::Tensor(), whole});
  if (c.norm == NormKind::layernorm) all.push_back({Init::zero, {c.hidden}, held ? held->bias : torch::Tensor(), whole});
}

// One layer's parameters in registration order; `L` null when not held.
// A layer with experts' MLP: the router [E, h] (whole on every rank), each expert's fc1
// [E, f1, h] and fc2 [E, h, f] (this rank's experts of its expert group, each split over
// the tensor group as the dense MLP is: SwiGLU's rows as [gate slice | up slice]), then
// their biases. `L` null when not held.
void add_experts(std::vector<WholeParameter>& all, const ModelSpec& c, const Parts& parts,
                 TransformerLayerImpl* L) {
  const std::int64_t h = c.hidden, E = c.experts, fe = c.expert_ffn_hidden;
  const std::int64_t f1 = c.mlp == MlpKind::swiglu ? 2 * fe : fe;
  const ExpertMLPImpl* X = L ? L->experts.get() : nullptr;
  const std::int64_t local = X ? X->local_experts : 0;
  const std::int64_t first = X && parts.expert ? parts.expert->rank() * local : 0;
  const Slice ffn = parts.expert_ffn;
  const bool swiglu = c.mlp == MlpKind::swiglu;
  auto mine = [=](const torch::Tensor& t) { return t.narrow(0, first, local); };
  auto fc1_part = [=](const torch::Tensor& t) {
    const torch::Tensor e = t.narrow(0, first, local);
    if (!swiglu) return e.narrow(1, ffn.begin, ffn.size);
    return torch::cat({e.narrow(1, ffn.begin, ffn.size), e.narrow(1, fe + ffn.begin, ffn.size)}, 1);
  };
  auto fc2_part = [=](const torch::Tensor& t) { return t.narrow(0, first, local).narrow(2, ffn.begin, ffn.size); };
  auto held = [&](torch::Tensor ExpertMLPImpl::*member) { return X ? X->*member : torch::Tensor(); };
  all.push_back({Init::normal, {E, h}, held(&ExpertMLPImpl::router), whole});
  all.push_back({Init::normal, {E, f1, h}, held(&ExpertMLPImpl::fc1), fc1_part});
  all.push_back({Init::residual, {E, h, fe}, held(&ExpertMLPImpl::fc2), fc2_part});
  if (c.bias) {
    all.push_back({Init::zero, {E, f1}, held(&ExpertMLPImpl::fc1_bias), mine});
    all.push_back({Init::zero, {E, h}, held(&ExpertMLPImpl::fc2_bias), mine});
  }
  // Shared experts: split over the tensor group as the dense MLP (fc1_rows, columns).
  if (c.shared_expert_ffn_hidden > 0) {
    const std::int64_t fs = c.shared_expert_ffn_hidden, fs1 = swiglu ? 2 * fs : fs;
    ModelSpec shared = c;
    shared.ffn_hidden = fs;
    const auto rows_part = fc1_rows(shared, parts.shared_ffn);
    all.push_back({Init::normal, {fs1, h}, held(&ExpertMLPImpl::shared_fc1), rows_part});
    all.push_back({Init::residual, {h, fs}, held(&ExpertMLPImpl::shared_fc2), columns(parts.shared_ffn)});
    if (c.bias) {
      all.push_back({Init::zero, {fs1}, held(&ExpertMLPImpl::shared_fc1_bias), rows_part});
      all.push_back({Init::zero, {h}, held(&ExpertMLPImpl::shared_fc2_bias), whole});
    }
  }
}

void add_mlp(std::vector<WholeParameter>& all, const ModelSpec& c, const Parts& parts,
             TransformerLayerImpl* L, bool layer_has_experts);

// Multi-head latent attention's parameters (LatentAttentionImpl's registration order): the
// query latent's down projection and norm (whole), its up projection (the rank's heads'
// rows), the key/value latent's down projection and norm (whole), its up projection (the
// rank's heads' rows), the output projection (the rank's heads' value columns).
void add_latent_attention(std::vector<WholeParameter>& all, const ModelSpec& c, const Parts& parts,
                          TransformerLayerImpl* L) {
  const std::int64_t h = c.hidden, H = c.heads, ql = c.q_lora_rank, kl = c.kv_lora_rank;
  const std::int64_t dqk = c.head_dim(), kvw = c.qk_nope_head_dim + c.v_head_dim, dv = c.v_head_dim;
  const LatentAttentionImpl* A = L ? L->latent.get() : nullptr;
  auto held = [&](auto get) { return A ? get(*A) : torch::Tensor(); };
  const Slice heads = parts.heads;
  if (ql > 0) {
    all.push_back({Init::normal, {ql, h}, held([](auto& a) { return a.q_down; }), whole});
    all.push_back({Init::one, {ql}, held([](auto& a) { return a.q_norm->weight; }), whole});
  }
  all.push_back({Init::normal, {H * dqk, ql > 0 ? ql : h}, held([](auto& a) { return a.q_up; }),
                 rows({heads.begin * dqk, heads.size * dqk})});
  all.push_back({Init::normal, {kl + c.qk_rope_head_dim, h}, held([](auto& a) { return a.kv_down; }), whole});
  all.push_back({Init::one, {kl}, held([](auto& a) { return a.kv_norm->weight; }), whole});
  all.push_back({Init::normal, {H * kvw, kl}, held([](auto& a) { return a.kv_up; }), rows({heads.begin * kvw, heads.size * kvw})});
  all.push_back({Init::residual, {h, H * dv}, held([](auto& a) { return a.proj->weight; }),
                 columns({heads.begin * dv, heads.size * dv})});
  if (c.bias) all.push_back({Init::zero, {h}, held([](auto& a) { return a.proj->bias; }), whole});
}

void add_layer(std::vector<WholeParameter>& all, const ModelSpec& c, const Parts& parts,
               TransformerLayerImpl* L, bool layer_has_experts) {
  const std::int64_t h = c.hidden;
  const std::int64_t q = c.query_width(), qkv = q + 2 * std::int64_t{c.kv_heads} * c.head_dim();
  auto held = [&](auto get) { return L ? get(*L) : torch::Tensor(); };
  const auto qkv_part = qkv_rows(c, parts.heads, parts.kv_heads);
  add_norm(all, c, L ? L->ln1.get() : nullptr);
  if (c.attention == AttentionKind::mla) {
    add_latent_attention(all, c, parts, L);
    add_mlp(all, c, parts, L, layer_has_experts);
    return;
  }
  all.push_back({Init::normal, {qkv, h}, held([](auto& l) { return l.attention->qkv->weight; }), qkv_part});
  if (c.bias) all.push_back({Init::zero, {qkv}, held([](auto& l) { return l.attention->qkv->bias; }), qkv_part});
  all.push_back({Init::residual, {h, q}, held([](auto& l) { return l.attention->proj->weight; }), columns(parts.queries)});
  if (c.bias) all.push_back({Init::zero, {h}, held([](auto& l) { return l.attention->proj->bias; }), whole});
  if (c.qk_norm) {
    const std::int64_t d = c.head_dim();
    all.push_back({Init::one, {d}, held([](auto& l) { return l.attention->q_norm->weight; }), whole});
    all.push_back({Init::one, {d}, held([](auto& l) { return l.attention->k_norm->weight; }), whole});
  }
  // The sink logits of the rank's heads (gpt-oss draws them; here from the model's normal).
  if (c.attention_sinks)
    all.push_back({Init::normal, {c.heads}, held([](auto& l) { return l.attention->sinks; }), rows(parts.heads)});
  add_mlp(all, c, parts, L, layer_has_experts);
}

// The MLP half: its norm, then the dense MLP or the experts.
void add_mlp(std::vector<WholeParameter>& all, const ModelSpec& c, const Parts& parts,
             TransformerLayerImpl* L, bool layer_has_experts) {
  const std::int64_t h = c.hidden, f = c.ffn_hidden;
  const std::int64_t fc1 = c.mlp == MlpKind::swiglu ? 2 * f : f;
  auto held = [&](auto get) { return L ? get(*L) : torch::Tensor(); };
  const auto fc1_part = fc1_rows(c, parts.ffn);
  add_norm(all, c, L ? L->ln2.get() : nullptr);
  if (layer_has_experts) {
    add_experts(all, c, parts, L);
    return;
  }
  all.push_back({Init::normal, {fc1, h}, held([](auto& l) { return l.mlp->fc1->weight; }), fc1_part});
  if (c.bias) all.push_back({Init::zero, {fc1}, held([](auto& l) { return l.mlp->fc1->bias; }), fc1_part});
  all.push_back({Init::residual, {h, f}, held([](auto& l) { return l.mlp->fc2->weight; }), columns(parts.ffn)});
  if (c.bias) all.push_back({Init::zero, {h}, held([](auto& l) { return l.mlp->fc2->bias; }), whole});
}

// Every parameter the shard `model` holds, from the seed (see gpt_model.hpp).
void initialise(GPTModelImpl& model, std::uint64_t seed) {
  const ModelSpec& c = model.spec;
  const ModelShard& shard = model.shard;
  const int t = degree_of(shard.tensor), r = rank_of(shard.tensor);
  // The experts' tensor group: the tensor group, or with MoE parallel folding their own.
  const TensorParallel& et = shard.expert && shard.expert->folded_tensor() ? shard.expert->folded_tensor() : shard.tensor;
  const Parts parts{tensor_slice(c.heads, t, r, "heads"), tensor_slice(c.kv_heads, t, r, "kv_heads"),
                    tensor_slice(c.query_width(), t, r, "query width"), tensor_slice(c.ffn_hidden, t, r, "ffn_hidden"),
                    tensor_slice(c.vocab, t, r, "vocab"),
                    c.experts > 0 ? tensor_slice(c.expert_ffn_hidden, degree_of(et), rank_of(et), "expert_ffn_hidden") : Slice{0, 0},
                    c.shared_expert_ffn_hidden > 0 ? tensor_slice(c.shared_expert_ffn_hidden, t, r, "shared_expert_ffn_hidden")
                                                   : Slice{0, 0},
                    shard.expert.get()};
  // The whole model's parameters in its registration order; each shard draws them all
  // from the model's own generator (so the generator advances identically everywhere)
  // and keeps its slice.
  const std::int64_t h = c.hidden;
  std::vector<WholeParameter> all;
  all.push_back({Init::normal, {c.vocab, h}, model.wte, rows(parts.vocab)});
  if (c.positions == PositionKind::learned) all.push_back({Init::normal, {c.seq_len, h}, model.wpe, whole});
  for (int i = 0; i < c.layers; ++i)
    add_layer(all, c, parts, model.holds_layer(i) ? &model.layers->at<TransformerLayerImpl>(layer_key(i)) : nullptr,
              c.is_moe_layer(i));
  add_norm(all, c, shard.head ? model.ln_f.get() : nullptr);
  if (!c.tied_embeddings)
    all.push_back({Init::normal, {c.vocab, h}, shard.head ? model.lm_head->weight : torch::Tensor(), rows(parts.vocab)});

  torch::NoGradGuard no_grad;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const double residual_std = kInitStd / std::sqrt(2.0 * std::max(1, c.layers));
  std::size_t initialised = 0;
  for (WholeParameter& p : all) {
    if (p.init == Init::normal || p.init == Init::residual) {
      const torch::Tensor value =
          torch::empty(p.shape).normal_(0.0, p.init == Init::residual ? residual_std : kInitStd, gen);
      if (p.held.defined()) p.held.copy_(p.part(value));
    } else if (p.held.defined()) {
      p.held.fill_(p.init == Init::one ? 1.0 : 0.0);
    }
    if (p.held.defined()) ++initialised;
  }
  // The table above must cover every registered parameter exactly once.
  if (initialised != model.parameters().size())
    throw std::logic_error("GPTModel: initialised " + std::to_string(initialised) + " of " +
                           std::to_string(model.parameters().size()) + " parameters");
}

}  // namespace

GPTModelImpl::GPTModelImpl(const ModelSpec& c, std::uint64_t seed, ModelShard s, bool flash)
    : spec(c), flash_attention(flash), shard(std::move(s)) {
  const TensorParallel& tp = shard.tensor;
  const int t = degree_of(tp), r = rank_of(tp);
  // Every split the shard makes, checked up front so the message names the model's size.
  for (const auto& [n, what] : {std::pair<std::int64_t, const char*>{c.heads, "heads"}, {c.hidden, "hidden"},
                                {c.ffn_hidden, "ffn_hidden"}})
    tensor_slice(n, t, r, what);
  if (c.kv_heads % t != 0)
    throw std::invalid_argument("tensor degree " + std::to_string(t) + " does not divide kv_heads " +
                                std::to_string(c.kv_heads) +
                                ": the key/value heads are split over the tensor group, not replicated (Megatron's rule)");
  const Slice vocab_part = tensor_slice(c.vocab, t, r, "vocab");
  if (c.layers < 1 || c.heads < 1 ||
      (c.attention_head_dim <= 0 && c.attention != AttentionKind::mla && c.hidden % c.heads != 0))
    throw std::invalid_argument("GPTModel: needs at least one layer and heads dividing hidden (or head_dim set)");

  if (shard.layers.empty())
    for (int i = 0; i < c.layers; ++i) shard.layers.push_back(i);
  for (std::size_t k = 0; k < shard.layers.size(); ++k) {
    const int i = shard.layers[k];
    if (i < 0 || i >= c.layers)
      throw std::invalid_argument("GPTModel: layer " + std::to_string(i) + " outside the model's " +
                                  std::to_string(c.layers) + " layers");
    if (k > 0 && i <= shard.layers[k - 1])
      throw std::invalid_argument("GPTModel: the shard's layers must be ascending and distinct");
  }

  // Registration order is the whole model's (wte, wpe, layers, ln_f, lm_head), so the
  // unsharded model's parameter names and order are unchanged.
  const bool holds_wte = shard.embedding || (shard.head && c.tied_embeddings);
  if (holds_wte) wte = register_parameter("wte", torch::empty({vocab_part.size, c.hidden}));
  if (shard.embedding && c.positions == PositionKind::learned)
    wpe = register_parameter("wpe", torch::empty({c.seq_len, c.hidden}));
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> held_layers;
  for (int i : shard.layers)
    held_layers.emplace_back(layer_key(i),
                             TransformerLayer(c, tp, shard.conjugates, c.is_moe_layer(i), shard.expert, shard.context,
                                              c.is_full_attention_layer(i) ? 0 : c.sliding_window, flash)
                                 .ptr());
  layers = register_module("layers", torch::nn::ModuleDict(held_layers));
  if (shard.head) {
    ln_f = register_module("ln_f", Norm(c.hidden, c.norm));
    if (!c.tied_embeddings)
      lm_head = register_module("lm_head", ColumnParallelLinear(c.hidden, c.vocab, false, tp, shard.conjugates.head_in,
                                                                shard.conjugates.beside_gemm.head_in));
  }

  initialise(*this, seed);
}

bool GPTModelImpl::holds_layer(int i) const { return layers && layers->contains(layer_key(i)); }

torch::Tensor GPTModelImpl::embed(const torch::Tensor& tokens) {
  if (!shard.embedding) throw std::logic_error("GPTModel: this shard does not hold the embedding");
  const std::int64_t s = tokens.size(1);
  if (s > spec.seq_len) throw std::invalid_argument("GPTModel: sequence longer than seq_len");
  // Rotary positions have no table: the layers rotate the queries and keys instead. With
  // context parallelism the tokens are the rank's chunks, at their global positions.
  const bool learned = wpe.defined();
  const torch::Tensor table =
      !learned ? torch::Tensor()
      : shard.context ? wpe.index_select(0, shard.context->positions(spec.seq_len).to(wpe.device()))
                      : wpe.slice(0, 0, s);
  if (degree_of(shard.tensor) == 1) {
    const torch::Tensor x = torch::embedding(wte, tokens);
    return learned ? x + table : x;
  }
  // Vocabulary-parallel: look up the tokens of this rank's rows, zeros for the others;
  // g sums the partial embeddings, so every rank has every token's row (sp_scatter: the
  // rows of its sequence shard). The positions are added after the sum, once.
  const Slice part = vocab_slice(spec, shard.tensor);
  const torch::Tensor outside = (tokens < part.begin) | (tokens >= part.begin + part.size);
  const torch::Tensor local = (tokens - part.begin).masked_fill(outside, 0);
  const torch::Tensor partial = torch::embedding(wte, local).masked_fill(outside.unsqueeze(-1), 0.0);
  const torch::Tensor x = leave_region(partial, shard.conjugates.embedding_out, shard.tensor);
  if (!learned) return x;
  const Slice positions = shard.conjugates.splits_sequence() ? sequence_slice(s, shard.tensor) : Slice{0, s};
  return x + table.narrow(0, positions.begin, positions.size);
}

torch::Tensor GPTModelImpl::layer(int i, const torch::Tensor& x) {
  if (!holds_layer(i)) throw std::logic_error("GPTModel: this shard does not hold layer " + std::to_string(i));
  return layers->at<TransformerLayerImpl>(layer_key(i)).forward(x);
}

torch::Tensor GPTModelImpl::logits(const torch::Tensor& x) {
  if (!shard.head) throw std::logic_error("GPTModel: this shard does not hold the head");
  const torch::Tensor h = ln_f(x);
  // Tied: logits_i = h E_i^T with E_i this rank's rows of the token embedding; f (or
  // sp_gather) makes the backward sum dh over the vocabulary slices. Untied: lm_head
  // enters its region the same way.
  return spec.tied_embeddings ? enter_region(h, wte, torch::Tensor(), shard.conjugates.head_in, shard.tensor,
                                               shard.conjugates.beside_gemm.head_in)
                                : lm_head(h);
}

torch::Tensor GPTModelImpl::head_loss(const torch::Tensor& x, const torch::Tensor& targets) {
  return vocab_parallel_cross_entropy(logits(x), targets, shard.tensor);
}

torch::Tensor GPTModelImpl::forward(const torch::Tensor& tokens, const torch::Tensor& targets) {
  if (!shard.embedding || !shard.head || static_cast<int>(shard.layers.size()) != spec.layers)
    throw std::logic_error("GPTModel: forward() needs a shard holding the whole model (embedding, layers, head)");
  torch::Tensor x = embed(tokens);
  for (int i = 0; i < spec.layers; ++i) x = layer(i, x);
  return head_loss(x, targets);
}

std::vector<torch::Tensor> GPTModelImpl::layer_parameters(int i) {
  if (!holds_layer(i)) throw std::logic_error("GPTModel: this shard does not hold layer " + std::to_string(i));
  return layers[layer_key(i)]->parameters();
}

std::vector<torch::Tensor> GPTModelImpl::layer_expert_parameters(int i) {
  if (!holds_layer(i)) throw std::logic_error("GPTModel: this shard does not hold layer " + std::to_string(i));
  const TransformerLayerImpl& L = layers->at<TransformerLayerImpl>(layer_key(i));
  if (!L.experts) return {};
  std::vector<torch::Tensor> out{L.experts->fc1, L.experts->fc2};
  if (L.experts->fc1_bias.defined()) out.insert(out.end(), {L.experts->fc1_bias, L.experts->fc2_bias});
  return out;
}

std::vector<torch::Tensor> GPTModelImpl::embedding_parameters() {
  if (!shard.embedding) return {};
  if (!wpe.defined()) return {wte};
  return {wte, wpe};
}

std::vector<torch::Tensor> GPTModelImpl::head_parameters() {
  if (!shard.head) return {};
  std::vector<torch::Tensor> out = ln_f->parameters();  // the scale (and shift)
  if (!spec.tied_embeddings) out.push_back(lm_head->weight);
  else if (!shard.embedding) out.push_back(wte);  // the head stage's own copy
  return out;
}

std::vector<torch::Tensor> GPTModelImpl::sequence_parallel_parameters() {
  if (degree_of(shard.tensor) == 1) return {};
  std::vector<torch::Tensor> out;
  auto add = [&](const torch::Tensor& t) {
    if (t.defined()) out.push_back(t);
  };
  // QK-norm's scales: each rank's gradient covers its heads (with or without sequence
  // parallelism).
  // Multi-head latent attention's down projections and latents' norms: each rank's
  // gradients cover its heads.
  if (spec.attention == AttentionKind::mla)
    for (int i : shard.layers) {
      const LatentAttentionImpl& A = *layers->at<TransformerLayerImpl>(layer_key(i)).latent;
      for (const torch::Tensor& t : {A.q_down, A.q_norm ? A.q_norm->weight : torch::Tensor(), A.kv_down, A.kv_norm->weight})
        add(t);
    }
  if (spec.qk_norm)
    for (int i : shard.layers) {
      TransformerLayerImpl& L = layers->at<TransformerLayerImpl>(layer_key(i));
      add(L.attention->q_norm->weight);
      add(L.attention->k_norm->weight);
    }
  if (!shard.conjugates.splits_sequence()) return out;
  // Those the model has: rotary positions have no table, RMSNorm no shift, a block
  // without biases none on its row-parallel layers.
  if (shard.embedding) add(wpe);
  for (int i : shard.layers) {
    TransformerLayerImpl& L = layers->at<TransformerLayerImpl>(layer_key(i));
    for (const torch::Tensor& t : {L.ln1->weight, L.ln1->bias, L.attention ? L.attention->proj->bias : torch::Tensor(), L.ln2->weight, L.ln2->bias,
                                   L.mlp ? L.mlp->fc2->bias : torch::Tensor()})
      add(t);
    // The router, when each rank routes its sequence shard (Megatron's dispatcher path).
    if (L.experts && shard.conjugates.experts_route_shard) add(L.experts->router);
  }
  if (shard.head) {
    add(ln_f->weight);
    add(ln_f->bias);
  }
  return out;
}

}  // namespace partune::backend
