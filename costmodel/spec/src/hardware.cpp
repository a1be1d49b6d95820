#include "partune/costmodel/hardware.hpp"

#include <algorithm>

#include "partune/costmodel/enum_names.hpp"

namespace partune {

const char* to_string(Precision p) { return enum_name(p); }  // enum_names.cpp

bool low_precision_gemms(Precision p) { return p == Precision::fp8 || p == Precision::mxfp8 || p == Precision::fp4; }

bool mixed_precision(Precision p) { return p == Precision::fp16 || p == Precision::bf16 || low_precision_gemms(p); }

Precision non_gemm_precision(Precision p) { return low_precision_gemms(p) ? Precision::bf16 : p; }

double bytes_per_element(Precision p) { return mixed_precision(p) ? 2.0 : 4.0; }

double GpuProfile::peak_flops(Precision p) const {
  switch (p) {
    case Precision::fp32: return peak_flops_fp32;
    case Precision::tf32: return peak_flops_tf32;
    case Precision::fp16: return peak_flops_fp16;
    case Precision::bf16: return peak_flops_bf16;
    case Precision::fp8: return peak_flops_fp8;
    case Precision::mxfp8: return peak_flops_mxfp8;
    case Precision::fp4: return peak_flops_fp4;
  }
  return peak_flops_fp32;
}

double FlashCurve::at(double seq, double head_dim) const {
  const double by_seq = seq_half > 0 && seq > 0 ? seq / (seq + seq_half) : 1.0;
  const double by_head_dim =
      head_dim_half > 0 && head_dim > 0 ? (head_dim / (head_dim + head_dim_half)) / (128.0 / (128.0 + head_dim_half)) : 1.0;
  return max_efficiency * by_seq * by_head_dim;
}

FlashCurve AttentionProfile::curve(AttentionKernel k) const {
  if (k == kernel) return {flash_efficiency, flash_seq_half, flash_head_dim_half};
  return kernels[static_cast<std::size_t>(k)];
}

std::string measured_kernels(const AttentionProfile& a) {
  std::string out;
  for (const auto& [k, name] : enum_names<AttentionKernel>())
    if (k != a.kernel && a.kernels[static_cast<std::size_t>(k)].max_efficiency > 0)
      out += std::string(out.empty() ? ", kernels " : ", ") + name;
  return out;
}

int InstanceType::gpus_per_nic() const {
  return std::max(1, gpus_per_node / std::max(1, nics_per_node));
}

}  // namespace partune
