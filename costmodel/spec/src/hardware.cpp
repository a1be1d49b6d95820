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

int InstanceType::gpus_per_nic() const {
  return std::max(1, gpus_per_node / std::max(1, nics_per_node));
}

}  // namespace partune
