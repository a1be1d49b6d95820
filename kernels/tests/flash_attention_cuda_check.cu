// flash_attention_cuda_check: the CUDA FlashAttention forward and backward
// (partune/kernels/flash_attention_cuda.hpp) against a plain double-precision CPU
// reference computed from the same fp16/bf16 inputs, for fp16 and bf16, head_dim 64 and
// 128, causal and not, seq_len 1, 100, 256 and 1000 (not multiples of the tiles: the tails).
//
// Tolerances, per tensor: max|got - want| <= tol * max|want| + 1e-4, where the absolute
// floor covers tensors that are exactly zero (seq_len 1: dq = dk = 0) and tol is
//   fp16: out 2e-3, dq/dk/dv 5e-3;   bf16: out 1e-2, dq/dk/dv 2e-2;   lse (fp32) 1e-3.
// Rounding the results to the element type alone costs up to 2^-11 (fp16) or 2^-8 (bf16)
// of an element; the kernels accumulate in fp32. Outputs, gradients, lse and the workspace
// start as NaN, so an element a kernel fails to write fails the check.
//
// Exit status: 0 all within tolerance, 1 a miss or a CUDA error, 77 no CUDA device
// (ctest's SKIP_RETURN_CODE).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "partune/kernels/flash_attention_cuda.hpp"

namespace {

namespace fa = partune::kernels::cuda;

constexpr double kAbsoluteFloor = 1e-4;
constexpr double kLseTolerance = 1e-3;
struct Tolerances {
  double output;
  double gradient;
};
constexpr Tolerances kF16Tolerances{2e-3, 5e-3};
constexpr Tolerances kBf16Tolerances{1e-2, 2e-2};

struct Case {
  int head_dim;
  bool causal;
  int seq_len;
};

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// ---- host conversions between the element types and float ----
template <typename T>
T to_element(float x);
template <>
__half to_element<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__nv_bfloat16 to_element<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
float to_float(__half x) { return __half2float(x); }
float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
struct Traits;
template <>
struct Traits<__half> {
  static constexpr fa::ElementType kType = fa::ElementType::f16;
  static constexpr const char* kName = "fp16";
  static constexpr Tolerances kTolerances = kF16Tolerances;
};
template <>
struct Traits<__nv_bfloat16> {
  static constexpr fa::ElementType kType = fa::ElementType::bf16;
  static constexpr const char* kName = "bf16";
  static constexpr Tolerances kTolerances = kBf16Tolerances;
};

// Device memory owned for one case; starts filled with 0xff bytes (NaN in fp16, bf16, fp32).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    check(cudaMalloc(&data_, std::max<std::size_t>(bytes, 1)), "cudaMalloc");
    check(cudaMemset(data_, 0xff, bytes), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  template <typename T>
  void upload(const std::vector<T>& host) {
    check(cudaMemcpy(data_, host.data(), bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  template <typename T>
  std::vector<float> download(std::size_t count) const {
    std::vector<T> host(count);
    check(cudaMemcpy(host.data(), data_, count * sizeof(T), cudaMemcpyDeviceToHost),
          "cudaMemcpy to host");
    std::vector<float> values(count);
    for (std::size_t i = 0; i < count; ++i) values[i] = to_float(host[i]);
    return values;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_;
};
template <>
std::vector<float> DeviceBuffer::download<float>(std::size_t count) const {
  std::vector<float> host(count);
  check(cudaMemcpy(host.data(), data_, count * sizeof(float), cudaMemcpyDeviceToHost),
        "cudaMemcpy to host");
  return host;
}

// One tensor of random N(0, 1) values rounded to T: `element` goes to the device, `value`
// (the same numbers as float) to the reference.
template <typename T>
struct Tensor {
  std::vector<T> element;
  std::vector<float> value;
};
template <typename T>
Tensor<T> random_tensor(std::size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  Tensor<T> t{std::vector<T>(count), std::vector<float>(count)};
  for (std::size_t i = 0; i < count; ++i) {
    t.element[i] = to_element<T>(normal(rng));
    t.value[i] = to_float(t.element[i]);
  }
  return t;
}

struct Inputs {
  std::vector<float> q, k, v, dout;
};
struct Results {
  std::vector<double> out, lse, dq, dk, dv;
};

// Forward and backward of head `bh` in double precision, straight from the definitions:
// P = softmax(S * scale) row by row, out = P V, D_i = dO_i . out_i, dS = P * (dO V^T - D),
// dV = P^T dO, dQ = dS K * scale, dK = dS^T Q * scale.
void reference_head(const Inputs& in, const fa::AttentionShape& s, int bh, Results& r) {
  const int n = s.seq_len, dim = s.head_dim;
  const std::size_t base = std::size_t(bh) * n * dim;
  auto row = [&](auto& x, int i) { return x.data() + base + std::size_t(i) * dim; };
  auto dot = [&](const auto* a, const auto* b) {
    double sum = 0;
    for (int d = 0; d < dim; ++d) sum += double(a[d]) * double(b[d]);
    return sum;
  };
  std::vector<double> p(std::size_t(n) * n, 0.0), scores(n);
  for (int i = 0; i < n; ++i) {
    const int visible = s.causal ? i + 1 : n;
    double max_score = -INFINITY, sum = 0;
    for (int j = 0; j < visible; ++j) {
      scores[j] = s.scale * dot(row(in.q, i), row(in.k, j));
      max_score = std::max(max_score, scores[j]);
    }
    for (int j = 0; j < visible; ++j) sum += std::exp(scores[j] - max_score);
    const double lse = max_score + std::log(sum);
    r.lse[std::size_t(bh) * n + i] = lse;
    double* out = row(r.out, i);
    for (int j = 0; j < visible; ++j) {
      p[std::size_t(i) * n + j] = std::exp(scores[j] - lse);
      for (int d = 0; d < dim; ++d) out[d] += p[std::size_t(i) * n + j] * row(in.v, j)[d];
    }
  }
  for (int i = 0; i < n; ++i) {
    const double d_i = dot(row(in.dout, i), row(r.out, i));
    const int visible = s.causal ? i + 1 : n;
    for (int j = 0; j < visible; ++j) {
      const double p_ij = p[std::size_t(i) * n + j];
      const double ds = p_ij * (dot(row(in.dout, i), row(in.v, j)) - d_i);
      for (int d = 0; d < dim; ++d) {
        row(r.dv, j)[d] += p_ij * row(in.dout, i)[d];
        row(r.dq, i)[d] += s.scale * ds * row(in.k, j)[d];
        row(r.dk, j)[d] += s.scale * ds * row(in.q, i)[d];
      }
    }
  }
}

// Largest |got - want| and |want| over a tensor, and how many got values are not finite.
struct Error {
  double max_error = 0, max_reference = 0;
  std::size_t not_finite = 0;
  bool within(double tolerance) const {
    return not_finite == 0 && max_error <= tolerance * max_reference + kAbsoluteFloor;
  }
};
Error compare(const std::vector<float>& got, const std::vector<double>& want) {
  Error e;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++e.not_finite;
    else e.max_error = std::max(e.max_error, std::abs(double(got[i]) - want[i]));
    e.max_reference = std::max(e.max_reference, std::abs(want[i]));
  }
  return e;
}

// Runs one case on the device, compares, prints a line; true when within tolerance.
template <typename T>
bool run_case(const Case& c, unsigned seed, cudaStream_t stream) {
  const int batch_heads = c.seq_len >= 1000 ? 2 : 3;
  const fa::AttentionShape shape{batch_heads, c.seq_len, c.head_dim, c.causal,
                                 float(1.0 / std::sqrt(double(c.head_dim)))};
  const std::size_t rows = std::size_t(batch_heads) * c.seq_len;
  const std::size_t count = rows * c.head_dim, bytes = count * sizeof(T);
  std::mt19937 rng(seed);
  const Tensor<T> q = random_tensor<T>(count, rng), k = random_tensor<T>(count, rng),
                  v = random_tensor<T>(count, rng), dout = random_tensor<T>(count, rng);

  DeviceBuffer q_d(bytes), k_d(bytes), v_d(bytes), dout_d(bytes), out_d(bytes), dq_d(bytes),
      dk_d(bytes), dv_d(bytes), lse_d(rows * sizeof(float)),
      workspace_d(fa::flash_attention_backward_workspace_bytes(shape));
  q_d.upload(q.element);
  k_d.upload(k.element);
  v_d.upload(v.element);
  dout_d.upload(dout.element);
  const fa::ElementType type = Traits<T>::kType;
  fa::flash_attention_forward(type, shape, q_d.as<T>(), k_d.as<T>(), v_d.as<T>(), out_d.as<T>(),
                              lse_d.as<float>(), stream);
  fa::flash_attention_backward(type, shape, q_d.as<T>(), k_d.as<T>(), v_d.as<T>(), out_d.as<T>(),
                               dout_d.as<T>(), lse_d.as<float>(), dq_d.as<T>(), dk_d.as<T>(),
                               dv_d.as<T>(), workspace_d.as<float>(), stream);
  check(cudaStreamSynchronize(stream), "running the kernels");

  Results want{std::vector<double>(count), std::vector<double>(rows), std::vector<double>(count),
               std::vector<double>(count), std::vector<double>(count)};
  const Inputs in{q.value, k.value, v.value, dout.value};
  for (int bh = 0; bh < batch_heads; ++bh) reference_head(in, shape, bh, want);

  const Tolerances tol = Traits<T>::kTolerances;
  const Error out = compare(out_d.download<T>(count), want.out);
  const Error lse = compare(lse_d.download<float>(rows), want.lse);
  const Error dq = compare(dq_d.download<T>(count), want.dq);
  const Error dk = compare(dk_d.download<T>(count), want.dk);
  const Error dv = compare(dv_d.download<T>(count), want.dv);
  const bool ok = out.within(tol.output) && lse.within(kLseTolerance) &&
                  dq.within(tol.gradient) && dk.within(tol.gradient) && dv.within(tol.gradient);
  std::printf("%s d=%-3d %-6s seq=%-4d max abs err (max |ref|): out %.2e (%.2f) lse %.2e "
              "dq %.2e (%.2f) dk %.2e (%.2f) dv %.2e (%.2f)%s  %s\n",
              Traits<T>::kName, c.head_dim, c.causal ? "causal" : "full", c.seq_len,
              out.max_error, out.max_reference, lse.max_error, dq.max_error, dq.max_reference,
              dk.max_error, dk.max_reference, dv.max_error, dv.max_reference,
              out.not_finite + lse.not_finite + dq.not_finite + dk.not_finite + dv.not_finite
                  ? " NON-FINITE"
                  : "",
              ok ? "ok" : "FAIL");
  return ok;
}

// head_dim 96 must be refused with std::invalid_argument before anything runs.
bool rejects_unsupported_head_dim() {
  const fa::AttentionShape bad{1, 16, 96, false, 0.1f};
  int refused = 0;
  try {
    fa::flash_attention_forward(fa::ElementType::f16, bad, nullptr, nullptr, nullptr, nullptr,
                                nullptr, nullptr);
  } catch (const std::invalid_argument&) {
    ++refused;
  }
  try {
    fa::flash_attention_backward_workspace_bytes(bad);
  } catch (const std::invalid_argument&) {
    ++refused;
  }
  try {
    fa::flash_attention_backward(fa::ElementType::bf16, bad, nullptr, nullptr, nullptr, nullptr,
                                 nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  } catch (const std::invalid_argument&) {
    ++refused;
  }
  std::printf("head_dim 96 refused by forward, workspace size and backward: %s\n",
              refused == 3 ? "ok" : "FAIL");
  return refused == 3;
}

int run_all() {
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  std::printf("device 0: %s (sm_%d%d)\n", properties.name, properties.major, properties.minor);
  cudaStream_t stream = nullptr;
  check(cudaStreamCreate(&stream), "cudaStreamCreate");
  int failures = rejects_unsupported_head_dim() ? 0 : 1;
  unsigned seed = 1;
  for (int head_dim : {64, 128})
    for (bool causal : {false, true})
      for (int seq_len : {1, 100, 256, 1000}) {
        const Case c{head_dim, causal, seq_len};
        failures += run_case<__half>(c, seed++, stream) ? 0 : 1;
        failures += run_case<__nv_bfloat16>(c, seed++, stream) ? 0 : 1;
      }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  std::printf("%s: %d failure(s)\n", failures ? "FAIL" : "ok", failures);
  return failures ? 1 : 0;
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  if (status != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: skipped\n");
    if (status != cudaSuccess) std::printf("(cudaGetDeviceCount: %s)\n", cudaGetErrorString(status));
    return 77;
  }
  try {
    return run_all();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash_attention_cuda_check: %s\n", e.what());
    return 1;
  }
}
