// The region-edge conjugates (conjugates.hpp): f and g (tensor_parallel.cpp) and
// sequence parallelism's gather and scatter as autograd functions.
#include "partune/backend/conjugates.hpp"

#include "partune/backend/fp8_linear.hpp"
#include "partune/backend/overlapped_linear.hpp"
#include "partune/backend/weight_gradients.hpp"

#include <stdexcept>
#include <string>

namespace partune::backend {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int kSequenceDim = 1;  // [batch, seq, hidden]

bool parallel(const TensorParallel& tp) { return tp && tp->degree() > 1; }

// As in tensor_parallel.cpp, the group travels as its address: the modules that own it
// outlive every graph built from their forward.
TensorParallelGroup& group_of(std::int64_t address) { return *reinterpret_cast<TensorParallelGroup*>(address); }

// sp_gather fused with the column-parallel GEMM after it: the forward all-gathers the
// sequence shards and multiplies; it keeps only the shard, and the backward all-gathers it
// again for dW while dX (over the whole sequence) is reduce-scattered back to shards.
// (The bias is added outside: a custom function's inputs must all be defined.)
struct GatherLinear : public torch::autograd::Function<GatherLinear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& shard, const torch::Tensor& weight,
                               std::int64_t group) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["weight"] = weight;  // the parameter itself: its dW may be deferred
    ctx->save_for_backward({shard, weight});
    const torch::Tensor whole = group_of(group).all_gather(shard, kSequenceDim);
    return torch::nn::functional::linear(whole, weight);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TensorParallelGroup& group = group_of(ctx->saved_data["group"].toInt());
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& shard = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor grad = grad_outputs[0].contiguous();  // [b, s, out / t]
    const torch::Tensor whole = group.all_gather(shard, kSequenceDim);  // the re-gather
    const torch::Tensor grad_input = group.reduce_scatter_sum(grad.matmul(weight), kSequenceDim);
    if (split_backward()) {  // dW now, or in the W step of a split backward
      WeightGradientStore::accumulate(ctx->saved_data["weight"].toTensor(), grad, whole);
      return {grad_input, torch::Tensor(), torch::Tensor()};
    }
    const torch::Tensor grad_weight =
        grad.reshape({-1, grad.size(-1)}).t().matmul(whole.reshape({-1, whole.size(-1)}));
    return {grad_input, grad_weight, torch::Tensor()};
  }
};

// sp_scatter: the sum over the group, of which this rank keeps its sequence shard;
// backward all-gathers the shards' gradients.
struct ScatterToSequence : public torch::autograd::Function<ScatterToSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& y, std::int64_t group) {
    ctx->saved_data["group"] = group;
    return group_of(group).reduce_scatter_sum(y, kSequenceDim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TensorParallelGroup& group = group_of(ctx->saved_data["group"].toInt());
    return {group.all_gather(grad_outputs[0], kSequenceDim), torch::Tensor()};
  }
};

// sp_gather alone: all-gather forward, reduce-scatter of the gradient backward.
struct GatherSequence : public torch::autograd::Function<GatherSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& shard, std::int64_t group) {
    ctx->saved_data["group"] = group;
    return group_of(group).all_gather(shard, kSequenceDim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TensorParallelGroup& group = group_of(ctx->saved_data["group"].toInt());
    return {group.reduce_scatter_sum(grad_outputs[0].contiguous(), kSequenceDim), torch::Tensor()};
  }
};

std::int64_t address_of(const TensorParallel& tp) { return reinterpret_cast<std::int64_t>(tp.get()); }

[[noreturn]] void not_at(Conjugate c, const char* edge) {
  throw std::invalid_argument(std::string("conjugate ") + std::to_string(static_cast<int>(c)) + " cannot stand at " +
                              edge);
}

}  // namespace

LayerConjugates LayerConjugates::sequence_parallel() {
  LayerConjugates c;
  c.attention_in = c.mlp_in = c.head_in = Conjugate::sp_gather;
  c.attention_out = c.mlp_out = c.embedding_out = Conjugate::sp_scatter;
  return c;
}

torch::Tensor enter_region(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                           Conjugate entry, const TensorParallel& tp, bool beside_gemm) {
  switch (entry) {
    case Conjugate::f: return project(copy_to_tensor_region(x, tp), weight, bias);
    case Conjugate::sp_gather: {
      if (!parallel(tp)) return project(x, weight, bias);
      const torch::Tensor y =
          beside_gemm ? chunked_gather_linear(x, weight, tp) : GatherLinear::apply(x, weight, address_of(tp));
      return bias.defined() ? y + bias : y;
    }
    default: not_at(entry, "the entry of a column-parallel region");
  }
}

torch::Tensor leave_region(const torch::Tensor& y, Conjugate exit, const TensorParallel& tp) {
  switch (exit) {
    case Conjugate::g: return reduce_from_tensor_region(y, tp);
    case Conjugate::sp_scatter:
      if (!parallel(tp)) return y;
      return ScatterToSequence::apply(y, address_of(tp));
    default: not_at(exit, "the exit of a row-parallel region");
  }
}

torch::Tensor project_out_of_region(const torch::Tensor& x, const torch::Tensor& weight, Conjugate exit,
                                    const TensorParallel& tp, bool beside_gemm) {
  if (beside_gemm && exit == Conjugate::sp_scatter && parallel(tp)) return chunked_linear_scatter(x, weight, tp);
  return leave_region(project(x, weight), exit, tp);
}

torch::Tensor gather_sequence(const torch::Tensor& x, const TensorParallel& tp) {
  if (!parallel(tp)) return x;
  return GatherSequence::apply(x, address_of(tp));
}

Slice sequence_slice(std::int64_t n, const TensorParallel& tp) {
  return tensor_slice(n, tp ? tp->degree() : 1, tp ? tp->rank() : 0, "the sequence length");
}

}  // namespace partune::backend
