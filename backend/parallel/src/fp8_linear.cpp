// FP8 projections (fp8_linear.hpp): an autograd function over at::_scaled_mm with
// per-tensor current scaling.
#include "partune/backend/fp8_linear.hpp"

#include <atomic>
#include <stdexcept>

#include "partune/backend/torch_compat.hpp"
#include "partune/backend/weight_gradients.hpp"

#ifdef PARTUNE_NO_FP8_GEMMS  // configured out (-DPARTUNE_FP8_GEMMS=OFF)
#undef PARTUNE_HAVE_SCALED_MM
#endif

namespace partune::backend {

namespace {

std::atomic<bool> fp8_on{false};

#ifdef PARTUNE_HAVE_SCALED_MM
constexpr double kE4m3Max = 448.0;  // the largest finite e4m3 value (OCP FP8 format)

// A tensor cast to e4m3 with its dequantising scale: t ~= data * scale.
struct Fp8Tensor {
  torch::Tensor data, scale;
};

Fp8Tensor to_fp8(const torch::Tensor& t) {
  const torch::Tensor scale = (t.abs().amax().to(torch::kFloat) / kE4m3Max).clamp_min(1e-12);
  return {(t / scale).to(at::ScalarType::Float8_e4m3fn).contiguous(), scale};
}

// cuBLASLt takes the first fp8 operand row-major and the second column-major.
torch::Tensor column_major(const torch::Tensor& t) { return t.t().contiguous().t(); }

class Fp8Linear : public torch::autograd::Function<Fp8Linear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight) {
    const Fp8Tensor xq = to_fp8(x.reshape({-1, x.size(-1)})), wq = to_fp8(weight);
    torch::Tensor y = at::_scaled_mm(xq.data, wq.data.t(), xq.scale, wq.scale, {}, {}, x.scalar_type(),
                                     /*use_fast_accum=*/true);
    ctx->save_for_backward({xq.data, xq.scale, wq.data, wq.scale});
    ctx->saved_data["shape"] = x.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<std::int64_t>(x.scalar_type());
    std::vector<std::int64_t> out = x.sizes().vec();
    out.back() = weight.size(0);
    return y.reshape(out);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &xq = saved[0], &x_scale = saved[1], &wq = saved[2], &w_scale = saved[3];
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const Fp8Tensor gq = to_fp8(grads[0].reshape({-1, wq.size(0)}).contiguous());
    // dX = dY W and dW = dY^T X, each with full accumulation.
    const torch::Tensor dx = at::_scaled_mm(gq.data, column_major(wq), gq.scale, w_scale, {}, {}, dtype, false);
    const torch::Tensor dw =
        at::_scaled_mm(gq.data.t().contiguous(), column_major(xq), gq.scale, x_scale, {}, {}, dtype, false);
    return {dx.reshape(ctx->saved_data["shape"].toIntVector()), dw};
  }
};

bool fp8_shapes(const torch::Tensor& x, const torch::Tensor& weight) {
  const std::int64_t tokens = x.numel() / x.size(-1);
  return x.is_cuda() && tokens % 16 == 0 && weight.size(0) % 16 == 0 && weight.size(1) % 16 == 0;
}
#endif

}  // namespace

bool fp8_gemms_available() {
#ifdef PARTUNE_HAVE_SCALED_MM
  return true;
#else
  return false;
#endif
}

void set_fp8_gemms(bool on) {
  if (on && !fp8_gemms_available())
    throw std::runtime_error("fp8 GEMMs need at::_scaled_mm (LibTorch 2.5 or later)");
  fp8_on = on;
}

bool fp8_gemms() { return fp8_on; }

torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
#ifdef PARTUNE_HAVE_SCALED_MM
  if (fp8_on && fp8_shapes(x, weight)) {
    const torch::Tensor y = Fp8Linear::apply(x, weight);
    return bias.defined() ? y + bias : y;
  }
#endif
  if (split_backward()) {
    const torch::Tensor y = split_linear(x, weight);
    return bias.defined() ? y + bias : y;
  }
  return torch::nn::functional::linear(x, weight, bias);
}

}  // namespace partune::backend
