// Multi-head latent attention over a tensor group (transformer_layer.hpp, LatentAttentionImpl).
#include "partune/backend/transformer_layer.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "partune/kernels/flash_attention.hpp"

namespace partune::backend {

LatentAttentionImpl::LatentAttentionImpl(const ModelSpec& c, TensorParallel tp, const LayerConjugates& conjugates,
                                         bool flash)
    : nope(c.qk_nope_head_dim), rope(c.qk_rope_head_dim), value(c.v_head_dim), flash_attention(flash),
      sequence_parallel(conjugates.splits_sequence()),
      tp_(std::move(tp)) {
  if (sequence_parallel && c.q_lora_rank == 0)
    throw std::invalid_argument("LatentAttention: sequence parallelism without a query latent (q_lora_rank 0) is not "
                                "run by the backend");
  if (flash_attention && value > nope + rope)
    throw std::invalid_argument("LatentAttention: FlashAttention with v_head_dim above qk_nope + qk_rope is not run");
  if (rope % 2 != 0) throw std::invalid_argument("LatentAttention: qk_rope_head_dim " + std::to_string(rope) + " is odd");
  const int t = tp_ ? tp_->degree() : 1, r = tp_ ? tp_->rank() : 0;
  local_heads = tensor_slice(c.heads, t, r, "heads").size;
  const std::int64_t h = c.hidden, dqk = nope + rope, ql = c.q_lora_rank, kl = c.kv_lora_rank;
  rotary = rotary_tables(c.seq_len, rope);
  if (ql > 0) {
    q_down = register_parameter("q_down", torch::zeros({ql, h}));
    q_norm = register_module("q_norm", Norm(ql, NormKind::rmsnorm));
  }
  q_up = register_parameter("q_up", torch::zeros({local_heads * dqk, ql > 0 ? ql : h}));
  kv_down = register_parameter("kv_down", torch::zeros({kl + rope, h}));
  kv_norm = register_module("kv_norm", Norm(kl, NormKind::rmsnorm));
  kv_up = register_parameter("kv_up", torch::zeros({local_heads * (nope + value), kl}));
  proj = register_module("proj", RowParallelLinear(c.heads * value, h, c.bias, tp_, conjugates.attention_out,
                                                   conjugates.beside_gemm.attention_out));
}

torch::Tensor LatentAttentionImpl::forward(const torch::Tensor& x) {
  // The latents: the down projections on the rank's rows. Without sequence parallelism
  // the region's f comes first; with it they run on the sequence shard and the latents
  // (not the hidden state) are all-gathered (the plan's attention_in).
  torch::Tensor in, q_latent, compressed;  // compressed: [b, s, kl + rope]
  if (sequence_parallel) {
    const torch::Tensor shard = torch::cat({torch::matmul(x, q_down.t()), torch::matmul(x, kv_down.t())}, -1);
    const torch::Tensor both = gather_sequence(shard, tp_);
    q_latent = both.narrow(-1, 0, q_down.size(0));
    compressed = both.narrow(-1, q_down.size(0), kv_down.size(0));
  } else {
    in = copy_to_tensor_region(x, tp_);  // f: attention_in
    if (q_down.defined()) q_latent = torch::matmul(in, q_down.t());
    compressed = torch::matmul(in, kv_down.t());
  }
  const std::int64_t b = compressed.size(0), s = compressed.size(1), H = local_heads, dqk = nope + rope;
  const auto heads_of = [&](const torch::Tensor& y, std::int64_t width) {
    return y.view({b, s, H, width}).permute({0, 2, 1, 3});  // [b, H, s, width]
  };
  const torch::Tensor q = heads_of(torch::matmul(q_latent.defined() ? q_norm(q_latent) : in, q_up.t()), dqk);
  const std::int64_t kl = kv_norm->weight.size(0);
  const torch::Tensor kv = heads_of(torch::matmul(kv_norm(compressed.narrow(-1, 0, kl)), kv_up.t()), nope + value);
  if (rotary.cos.device() != compressed.device() || rotary.cos.scalar_type() != compressed.scalar_type())
    rotary = {rotary.cos.to(compressed.options()), rotary.sin.to(compressed.options())};
  const torch::Tensor cos = rotary.cos.narrow(0, 0, s), sin = rotary.sin.narrow(0, 0, s);
  const torch::Tensor q_pe = apply_rotary(q.narrow(-1, nope, rope), cos, sin);
  const torch::Tensor k_pe = apply_rotary(compressed.narrow(-1, kl, rope).unsqueeze(1), cos, sin);  // one for all heads
  const torch::Tensor query = torch::cat({q.narrow(-1, 0, nope), q_pe}, -1);
  const torch::Tensor key = torch::cat({kv.narrow(-1, 0, nope), k_pe.expand({b, H, s, rope})}, -1);
  const torch::Tensor v = kv.narrow(-1, nope, value);
  torch::Tensor ctx;
  if (flash_attention) {
    // One head width for the kernel: the values padded with zeros to dqk, dropped after.
    const torch::Tensor padded = value < dqk ? torch::constant_pad_nd(v, {0, dqk - value}) : v;
    ctx = kernels::fused_attention(query, key, padded, true).narrow(-1, 0, value);
  } else {
    ctx = causal_attention(query, key, v);
  }
  return proj(ctx.permute({0, 2, 1, 3}).reshape({b, s, H * value}));
}

}  // namespace partune::backend
