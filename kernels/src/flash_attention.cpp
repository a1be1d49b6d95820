// The attention interface (flash_attention.hpp): the standard path in LibTorch ops, and
// FlashAttention as an autograd function over the CPU tiles (flash_attention_cpu.hpp),
// spread over threads by (batch x heads, block); CUDA tensors go to the CUDA kernels.
#include "partune/kernels/flash_attention.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include <ATen/Parallel.h>

#include "flash_attention_cpu.hpp"
#include "flash_attention_dispatch.hpp"

namespace partune::kernels {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const FlashAttentionOptions& o) {
  const auto fail = [](const std::string& why) { throw std::invalid_argument("flash_attention: " + why); };
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) fail("q, k and v must be [batch, heads, seq, head_dim]");
  if (!q.sizes().equals(k.sizes()) || !q.sizes().equals(v.sizes())) fail("q, k and v must have one shape");
  if (q.device() != k.device() || q.device() != v.device()) fail("q, k and v must be on one device");
  if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type()) fail("q, k and v must have one dtype");
  if (q.size(2) < 1 || q.size(3) < 1) fail("the sequence and the head dim must not be empty");
  if (o.block_q < 1 || o.block_k < 1) fail("block sizes must be at least 1");
  if (q.is_cpu() && q.scalar_type() != torch::kFloat32) fail("the CPU kernel takes float32");
}

// A [batch, heads, seq, head_dim] tensor whose rows are head_dim contiguous floats.
torch::Tensor rows_contiguous(const torch::Tensor& t) {
  return t.stride(3) == 1 && t.stride(2) >= t.size(3) ? t : t.contiguous();
}

detail::TileShape tile_shape(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                             std::int64_t block_q, std::int64_t block_k) {
  detail::TileShape s;
  s.seq = q.size(2);
  s.head_dim = q.size(3);
  s.ldq = q.stride(2);
  s.ldk = k.stride(2);
  s.ldv = v.stride(2);
  s.ldo = q.size(1) * q.size(3);  // out is [batch, seq, heads, head_dim] underneath
  s.block_q = std::min(block_q, s.seq);
  s.block_k = std::min(block_k, s.seq);
  s.causal = causal;
  s.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  return s;
}

// The first float of (batch b, head h) of a [batch, heads, ...] tensor.
const float* head_of(const torch::Tensor& t, std::int64_t bh) {
  const std::int64_t heads = t.size(1);
  return t.data_ptr<float>() + (bh / heads) * t.stride(0) + (bh % heads) * t.stride(1);
}
float* head_of(torch::Tensor& t, std::int64_t bh) { return const_cast<float*>(head_of(std::as_const(t), bh)); }

// Every (batch x head, query block) is independent: one unit of work each.
void cpu_forward(const detail::TileShape& s, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                 torch::Tensor& out, torch::Tensor& lse) {
  const std::int64_t blocks = s.query_blocks(), units = q.size(0) * q.size(1) * blocks;
  at::parallel_for(0, units, 1, [&](std::int64_t begin, std::int64_t end) {
    torch::Tensor work = torch::empty({detail::forward_work_floats(s)}, torch::kFloat32);
    for (std::int64_t u = begin; u < end; ++u) {
      const std::int64_t bh = u / blocks;
      detail::flash_forward_query_block(s, head_of(q, bh), head_of(k, bh), head_of(v, bh), head_of(out, bh),
                                        head_of(lse, bh), u % blocks, work.data_ptr<float>());
    }
  });
}

// By (batch x head) when there are enough of them to go round the threads, each writing
// its own dq; else by (batch x head, key block), each thread adding its share of dq into
// a partial of its own, summed at the end (memory: threads x dq, linear in seq).
void cpu_backward(const detail::TileShape& s, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& dout, const torch::Tensor& lse, const torch::Tensor& d_row, torch::Tensor& dq,
                  torch::Tensor& dk, torch::Tensor& dv) {
  const std::int64_t heads = q.size(0) * q.size(1), blocks = s.key_blocks();
  const int threads = at::get_num_threads();
  const bool by_head = threads == 1 || heads >= threads;
  torch::Tensor partial = by_head ? dq.unsqueeze(0) : torch::zeros({threads, q.size(0), q.size(1), s.seq, s.head_dim});
  const std::int64_t units = by_head ? heads : heads * blocks;
  at::parallel_for(0, units, 1, [&](std::int64_t begin, std::int64_t end) {
    torch::Tensor work = torch::empty({detail::backward_work_floats(s)}, torch::kFloat32);
    torch::Tensor mine = partial[by_head ? 0 : at::get_thread_num()];
    for (std::int64_t u = begin; u < end; ++u) {
      const std::int64_t bh = by_head ? u : u / blocks;
      for (std::int64_t b = by_head ? 0 : u % blocks; b < (by_head ? blocks : u % blocks + 1); ++b)
        detail::flash_backward_key_block(s, head_of(q, bh), head_of(k, bh), head_of(v, bh), head_of(dout, bh),
                                         head_of(lse, bh), head_of(d_row, bh), head_of(mine, bh), head_of(dk, bh),
                                         head_of(dv, bh), b, work.data_ptr<float>());
    }
  });
  if (!by_head) dq.copy_(partial.sum(0));
}

struct FlashAttentionFunction : public torch::autograd::Function<FlashAttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in, const torch::Tensor& k_in,
                               const torch::Tensor& v_in, bool causal, std::int64_t block_q, std::int64_t block_k) {
    const torch::Tensor q = rows_contiguous(q_in), k = rows_contiguous(k_in), v = rows_contiguous(v_in);
    // [batch, seq, heads, head_dim] underneath, seen as [batch, heads, seq, head_dim]: the
    // caller's merge of the heads (permute, reshape to [batch, seq, hidden]) is then a view,
    // so the output it keeps for its projection is the one kept here for backward.
    // (The CUDA kernels write it dense.)
    torch::Tensor out =
        q.is_cuda() ? torch::empty(q.sizes(), q.options().memory_format(torch::MemoryFormat::Contiguous))
                    : torch::empty({q.size(0), q.size(2), q.size(1), q.size(3)}, q.options()).permute({0, 2, 1, 3});
    torch::Tensor lse = torch::empty({q.size(0), q.size(1), q.size(2)}, q.options().dtype(torch::kFloat32));
    if (q.is_cuda()) {
      detail::cuda_forward(q, k, v, causal, out, lse);
    } else {
      cpu_forward(tile_shape(q, k, v, causal, block_q, block_k), q, k, v, out, lse);
    }
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["block_q"] = block_q;
    ctx->saved_data["block_k"] = block_k;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    const bool causal = ctx->saved_data["causal"].toBool();
    const torch::Tensor dout = grad_outputs[0].contiguous();
    torch::Tensor dq = torch::zeros(q.sizes(), q.options().memory_format(torch::MemoryFormat::Contiguous));
    torch::Tensor dk = torch::empty_like(dq), dv = torch::empty_like(dq);
    if (q.is_cuda()) {
      detail::cuda_backward(q, k, v, out, dout, lse, causal, dq, dk, dv);
    } else {
      const torch::Tensor d_row = (dout * out).sum(-1);  // D_i = rowsum(dO o O): [batch, heads, seq]
      cpu_backward(tile_shape(q, k, v, causal, ctx->saved_data["block_q"].toInt(), ctx->saved_data["block_k"].toInt()),
                   q, k, v, dout, lse, d_row, dq, dk, dv);
    }
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor attention_probabilities(const torch::Tensor& q, const torch::Tensor& k, bool causal) {
  const std::int64_t s = q.size(-2);
  const torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  if (!causal) return torch::softmax(scores, -1);
  const torch::Tensor future = torch::ones({s, s}, torch::dtype(torch::kBool).device(q.device())).triu(1);  // j > i
  return torch::softmax(scores.masked_fill(future, -std::numeric_limits<float>::infinity()), -1);
}

torch::Tensor standard_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
  return torch::matmul(attention_probabilities(q, k, causal), v);
}

torch::Tensor flash_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal,
                              const FlashAttentionOptions& options) {
  check_inputs(q, k, v, options);
  if (q.is_cuda() && !flash_attention_has_cuda())
    throw std::invalid_argument("flash_attention: CUDA tensors, and this build has no CUDA kernels (nvcc not found)");
  return FlashAttentionFunction::apply(q, k, v, causal, options.block_q, options.block_k);
}

}  // namespace partune::kernels
