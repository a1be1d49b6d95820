// What PyTorch's eager operators run for the ops between the GEMMs (kernel_fusion: eager),
// written from partune's LibTorch backend, the eager stack the recorded GPU profiles ran
// (backend/model/src/transformer_layer.cpp, parallel_linear.cpp): each operator one kernel that
// reads its inputs and writes its output once. The class says at what rate LibTorch runs
// it (layer_plan.hpp's KernelClass): contiguous operands vectorised (elementwise); an
// operand broadcast (a per-row factor, a table, a bias) or strided (a slice, a permuted
// view) through the non-vectorised kernel (strided); norms and reductions (norm); copies.
// Counts are in elements of the tensor the op works on (n); tiny tensors (one value a
// row) count as launches without bytes.
#include "plan_builder.hpp"

namespace partune::detail {

PassWork eager_norm(NormKind norm, double n, double eb) {
  PassWork w;
  if (norm == NormKind::layernorm) {
    // torch::layer_norm: one kernel forward (read x, write y); backward the input's
    // gradient (read dy and x, write dx) and the scale's and shift's (read dy and x).
    w.forward.add(KernelClass::norm, 2 * n * eb, 1);
    w.backward.add(KernelClass::norm, 5 * n * eb, 2);
    return w;
  }
  // RMSNorm (RmsNormFunction): r = rsqrt(mean(x^2) + eps); y = (x * r) * w.
  //   forward: x.pow(2) (read, write), mean (read), + eps and rsqrt (a value a row),
  //            x * r and * w (broadcast: read, write each);
  w.forward.add(KernelClass::elementwise, 2 * n * eb, 3);
  w.forward.add(KernelClass::norm, n * eb, 1);
  w.forward.add(KernelClass::strided, 4 * n * eb, 2);
  //   backward: g = dy * w, dx *= r, x * (r^3 mean(g x)), (dy * x) * r (broadcast: 8n);
  //            g * x, dx - ..., dy * x (3n each) and two row-sized ops; mean and the
  //            scale's sum over tokens (read each).
  w.backward.add(KernelClass::strided, 8 * n * eb, 4);
  w.backward.add(KernelClass::elementwise, 9 * n * eb, 5);
  w.backward.add(KernelClass::norm, 2 * n * eb, 2);
  return w;
}

PassWork eager_rotary(double n, double eb) {
  // apply_rotary: x * cos + cat(-x2, x1) * sin, over a permuted view of the QKV output.
  //   forward: -x2 (half read, half written), x * cos and rotated * sin (broadcast tables),
  //            the cat (a copy), the sum (contiguous);
  PassWork w;
  w.forward.add(KernelClass::strided, 5 * n * eb, 3);
  w.forward.add(KernelClass::copy, 2 * n * eb, 1);
  w.forward.add(KernelClass::elementwise, 3 * n * eb, 1);
  //   backward: dy * cos, dy * sin, the negation's (broadcast: 5n); the cat's two slices
  //            into zeroed tensors (fills n each, copies n) and the three paths' gradients
  //            summed (two adds of 3n).
  w.backward.add(KernelClass::strided, 5 * n * eb, 3);
  w.backward.add(KernelClass::elementwise, 8 * n * eb, 4);
  w.backward.add(KernelClass::copy, n * eb, 2);
  return w;
}

PassWork eager_activation(MlpKind mlp, double n, double eb) {
  PassWork w;
  if (mlp == MlpKind::swiglu) {
    // SwiGluFunction over y = [gate | up] (slices of fc1's output: strided):
    //   forward silu(gate) (read, write) then * up in place (read two, write);
    //   backward sigmoid(gate), then dup = gate s dout and dgate = dout up s (1 + gate -
    //   gate s) in place, ten operators over n (27 n read and written).
    w.forward.add(KernelClass::strided, 5 * n * eb, 2);
    w.backward.add(KernelClass::strided, 27 * n * eb, 10);
    return w;
  }
  // GeLU: torch::gelu forward (read, write); its backward (read dy and x, write dx).
  w.forward.add(KernelClass::elementwise, 2 * n * eb, 1);
  w.backward.add(KernelClass::elementwise, 3 * n * eb, 1);
  return w;
}

PassWork eager_residual(double n, double eb, bool dropout) {
  // x + f(x): the sum (read two, write); backward the residual's two gradients summed.
  PassWork w;
  w.forward.add(KernelClass::elementwise, 3 * n * eb, 1);
  w.backward.add(KernelClass::elementwise, 3 * n * eb, 1);
  if (dropout) {
    // Dropout before the sum: read, write and a byte of mask forward; backward the mask's
    // product (read the gradient and the mask, write).
    w.forward.add(KernelClass::elementwise, 2 * n * eb + n, 1);
    w.backward.add(KernelClass::elementwise, 2 * n * eb + n, 1);
  }
  return w;
}

PassWork eager_bias(double n, double eb) {
  // y + b over the GEMM's output (b broadcast: read, write); backward b's gradient, the sum
  // of dy over tokens (read).
  PassWork w;
  w.forward.add(KernelClass::strided, 2 * n * eb, 1);
  w.backward.add(KernelClass::norm, n * eb, 1);
  return w;
}

PassWork eager_attention_layout(double q, double kv, double eb) {
  // Q, K and V are permuted views of slices of the QKV output, which the fused core reads
  // as they are (and writes its context in the layout the projection reads). Backward,
  // each slice's gradient becomes the whole QKV output's shape (autograd's slice
  // backward: a zeroed tensor, a fill, and the slice copied in through the strided copy)
  // and the three are summed (two adds over it).
  const double all = q + 2 * kv;
  PassWork w;
  w.backward.add(KernelClass::elementwise, 3 * all * eb + 2 * 3 * all * eb, 3 + 2);
  w.backward.add(KernelClass::strided_copy, 2 * all * eb, 3);
  return w;
}

PassWork eager_score_passes(double scores, double q, double kv, double eb) {
  // kernels::attention_probabilities, then matmul with V, under autograd (the profiled
  // standard-attention step, docs/device-runs/2026-11-26-h100/second-run):
  //   forward: Q, K, V made contiguous for the batched products (strided copies), the
  //            scale (read, write), the causal mask's masked_fill (the s x s mask
  //            broadcast: read, a byte of mask, write), the softmax (read, write), a copy
  //            of the probabilities (the profile's device-to-device copy);
  //   backward: the same passes' gradients: the softmax's (read two, write), the mask's,
  //            the scale's and a product over the scores (read two, write), a copy, and
  //            dq, dk and dv back to the heads' layout.
  PassWork w;
  const double all = q + 2 * kv;
  w.forward.add(KernelClass::strided_copy, 2 * all * eb, 3);
  w.forward.add(KernelClass::elementwise, 2 * scores * eb, 1);
  w.forward.add(KernelClass::strided, scores * (2 * eb + 1), 1);
  w.forward.add(KernelClass::norm, 2 * scores * eb, 1);
  w.forward.add(KernelClass::copy, 2 * scores * eb, 1);
  w.backward.add(KernelClass::norm, 3 * scores * eb, 1);
  w.backward.add(KernelClass::strided, scores * (2 * eb + 1), 1);
  w.backward.add(KernelClass::elementwise, 2 * scores * eb + 3 * scores * eb, 2);
  w.backward.add(KernelClass::copy, 2 * scores * eb, 1);
  w.backward.add(KernelClass::strided_copy, 2 * all * eb, 3);
  return w;
}

namespace {
// to_fp8 over n bf16 elements: |t| (read, write), its maximum (read), three one-value
// kernels for the scale, t / scale (the scale a one-element tensor: the non-vectorised
// kernel), the cast to e4m3 (read two bytes, write one).
void cast_to_fp8(KernelWork& w, double n) {
  w.add(KernelClass::elementwise, 4 * n, 1 + 3);
  w.add(KernelClass::norm, 2 * n, 1);
  w.add(KernelClass::strided, 4 * n, 1);
  w.add(KernelClass::copy, 3 * n, 1);
}
}  // namespace

PassWork eager_fp8_gemm(double m, double n, double k) {
  // Forward: X and W cast (W again every micro-batch). Backward: dY cast, then the three
  // fp8 operands cuBLASLt needs K-major made contiguous: W^T for dX, dY^T and X^T for dW
  // (one byte read and one written an element).
  PassWork w;
  cast_to_fp8(w.forward, m * k);
  cast_to_fp8(w.forward, k * n);
  cast_to_fp8(w.backward, m * n);
  w.backward.add(KernelClass::transpose, 2 * (k * n + m * n + m * k), 3);
  return w;
}

}  // namespace partune::detail
