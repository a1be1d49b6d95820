// A low-precision GEMM's operand casts as Transformer Engine's fused kernels run them
// (plan_builder.hpp's fused_low_precision_casts). Y[m x n] = X[m x k] W[k x n]: the forward
// casts X and W, the backward dY; each cast also writes the transposed (column-wise) copy
// the other two GEMMs of the triple read (dX = dY W^T, dW = X^T dY), so nothing is cast twice.
//   fp8, delayed scaling:  cast-transpose, read 2 bytes, write 1 + 1 (the amax rides along)
//   fp8, current scaling:  an amax pass (read 2), then the cast-transpose
//   MXFP8:                 read 2, write 1 + 1 and an e8m0 scale per 32 elements each way
//   NVFP4:                 read 2, write 0.5 + 0.5 and an e4m3 scale per 16 each way
// TE's kernels stream like a copy (KernelClass::copy). Not modelled: TE's LayerNorm or
// activation kernels that write their output already cast (the X cast of QKV and fc1 is then
// part of the norm's pass), and the weights' casts cached over a step's micro-batches.
#include "plan_builder.hpp"

namespace partune::detail {

namespace {

// Bytes an element a cast-transpose of this format moves.
double cast_transpose_bytes(Precision p) {
  switch (p) {
    case Precision::mxfp8: return 2.0 + 2 * (1.0 + 1.0 / 32);
    case Precision::fp4: return 2.0 + 2 * (0.5 + 1.0 / 16);
    default: return 2.0 + 1.0 + 1.0;  // fp8
  }
}

void cast(KernelWork& w, Precision p, Fp8Recipe recipe, double elements) {
  if (p == Precision::fp8 && recipe == Fp8Recipe::current) w.add(KernelClass::norm, 2.0 * elements, 1);  // amax
  w.add(KernelClass::copy, cast_transpose_bytes(p) * elements, 1);
}

}  // namespace

PassWork fused_low_precision_casts(Precision p, Fp8Recipe recipe, double m, double n, double k) {
  PassWork w;
  cast(w.forward, p, recipe, m * k);
  cast(w.forward, p, recipe, k * n);
  cast(w.backward, p, recipe, m * n);
  return w;
}

}  // namespace partune::detail
