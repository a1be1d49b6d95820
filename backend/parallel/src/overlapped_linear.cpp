// The chunked GEMMs beside their sequence-parallel collectives (overlapped_linear.hpp), as
// autograd functions over the rings of ring_exchange.hpp.
#include "partune/backend/overlapped_linear.hpp"

#include <stdexcept>

#include "partune/backend/weight_gradients.hpp"
#include "ring_exchange.hpp"

namespace partune::backend {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kSequenceDim = 1;  // [batch, seq, features]

// As in conjugates.cpp, the group travels as its address: the modules that own it outlive
// every graph built from their forward.
TensorParallelGroup& group_of(AutogradContext* ctx) {
  return *reinterpret_cast<TensorParallelGroup*>(ctx->saved_data["group"].toInt());
}

// The rows of tensor rank `owner`'s sequence shard, n positions each.
torch::Tensor rows_of(const torch::Tensor& t, int owner, std::int64_t n) {
  return t.narrow(kSequenceDim, owner * n, n);
}

// dY^T X over the tokens: [out, in].
torch::Tensor weight_gradient(const torch::Tensor& grad, const torch::Tensor& input) {
  return grad.reshape({-1, grad.size(-1)}).t().matmul(input.reshape({-1, input.size(-1)}));
}

// [.., n, ..] with n along the sequence and `last` features.
std::vector<std::int64_t> sized(const torch::Tensor& like, std::int64_t n, std::int64_t last) {
  std::vector<std::int64_t> sizes = like.sizes().vec();
  sizes[kSequenceDim] = n;
  sizes.back() = last;
  return sizes;
}

// dW summed over the chunks in fp32 (a bf16 sum of t rounded products would lose what one
// GEMM's fp32 accumulation keeps), in the weight's format at the end.
struct ChunkedWeightGradient {
  torch::Tensor sum;
  explicit ChunkedWeightGradient(const torch::Tensor& weight)
      : sum(torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat))) {}
  void add(const torch::Tensor& grad, const torch::Tensor& input) { sum.add_(weight_gradient(grad, input)); }
  torch::Tensor in(const torch::Tensor& weight) const { return sum.to(weight.scalar_type()); }
};

void keep(AutogradContext* ctx, const torch::Tensor& input, const torch::Tensor& weight, std::int64_t group) {
  ctx->saved_data["group"] = group;
  ctx->saved_data["weight"] = weight;  // the parameter itself: its dW may be deferred
  ctx->save_for_backward({input, weight});
}

struct ChunkedGatherLinear : public torch::autograd::Function<ChunkedGatherLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& shard, const torch::Tensor& weight,
                               std::int64_t group) {
    keep(ctx, shard, weight, group);
    TensorParallelGroup& g = group_of(ctx);
    const std::int64_t n = shard.size(kSequenceDim);
    torch::Tensor y = torch::empty(sized(shard, n * g.degree(), weight.size(0)), shard.options());
    ring_all_gather(g, shard, [&](int source, const torch::Tensor& chunk) {
      rows_of(y, source, n).copy_(torch::nn::functional::linear(chunk, weight));
    });
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TensorParallelGroup& g = group_of(ctx);
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &shard = saved[0], &weight = saved[1];
    const torch::Tensor grad = grad_outputs[0].contiguous();  // [b, s, out/t]
    const std::int64_t n = shard.size(kSequenceDim);
    // dX: each owner's rows of dY W, summed over the group on the ring of partial sums.
    const torch::Tensor grad_input =
        ring_reduce_scatter(g, [&](int owner) { return rows_of(grad, owner, n).matmul(weight); });
    if (split_backward()) {  // dW in the W step: the whole input re-gathered for it
      torch::Tensor whole = torch::empty(sized(shard, n * g.degree(), shard.size(-1)), shard.options());
      ring_all_gather(g, shard, [&](int source, const torch::Tensor& chunk) { rows_of(whole, source, n).copy_(chunk); });
      WeightGradientStore::accumulate(ctx->saved_data["weight"].toTensor(), grad, whole);
      return {grad_input, torch::Tensor(), torch::Tensor()};
    }
    // dW: the shards re-gathered, each chunk's dY_c^T X_c while the next one travels.
    ChunkedWeightGradient dw(weight);
    ring_all_gather(g, shard, [&](int source, const torch::Tensor& chunk) { dw.add(rows_of(grad, source, n), chunk); });
    return {grad_input, dw.in(weight), torch::Tensor()};
  }
};

struct ChunkedLinearScatter : public torch::autograd::Function<ChunkedLinearScatter> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               std::int64_t group) {
    keep(ctx, x, weight, group);
    TensorParallelGroup& g = group_of(ctx);
    const std::int64_t n = tensor_slice(x.size(kSequenceDim), g.degree(), g.rank(), "the sequence").size;
    return ring_reduce_scatter(
        g, [&](int owner) { return torch::nn::functional::linear(rows_of(x, owner, n), weight); });
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TensorParallelGroup& g = group_of(ctx);
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1];
    const torch::Tensor grad = grad_outputs[0].contiguous();  // [b, s/t, out]
    const std::int64_t n = grad.size(kSequenceDim);
    const bool deferred = split_backward();
    torch::Tensor grad_input = torch::empty_like(x, at::MemoryFormat::Contiguous);
    torch::Tensor whole_grad = deferred ? torch::empty(sized(grad, x.size(kSequenceDim), grad.size(-1)), grad.options())
                                        : torch::Tensor();
    ChunkedWeightGradient dw(weight);
    // The gradient's shards on the all-gather ring: each chunk's dX rows, and its dW share.
    ring_all_gather(g, grad, [&](int source, const torch::Tensor& chunk) {
      rows_of(grad_input, source, n).copy_(chunk.matmul(weight));
      if (deferred)
        rows_of(whole_grad, source, n).copy_(chunk);
      else
        dw.add(chunk, rows_of(x, source, n));
    });
    if (deferred) {
      WeightGradientStore::accumulate(ctx->saved_data["weight"].toTensor(), whole_grad, x);
      return {grad_input, torch::Tensor(), torch::Tensor()};
    }
    return {grad_input, dw.in(weight), torch::Tensor()};
  }
};

std::int64_t address_of(const TensorParallel& tp) {
  if (!tp || tp->degree() < 2) throw std::invalid_argument("a chunked GEMM beside its collective needs tensor degree > 1");
  return reinterpret_cast<std::int64_t>(tp.get());
}

}  // namespace

torch::Tensor chunked_gather_linear(const torch::Tensor& shard, const torch::Tensor& weight, const TensorParallel& tp) {
  return ChunkedGatherLinear::apply(shard, weight, address_of(tp));
}

torch::Tensor chunked_linear_scatter(const torch::Tensor& x, const torch::Tensor& weight, const TensorParallel& tp) {
  return ChunkedLinearScatter::apply(x, weight, address_of(tp));
}

}  // namespace partune::backend
