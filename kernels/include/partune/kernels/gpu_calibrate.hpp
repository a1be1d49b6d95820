#pragma once
// `partune calibrate --device cuda`: micro-benchmarks of one CUDA GPU through the calls the
// backend makes on it (LibTorch bf16 matmuls and element-wise kernels, FP8 scaled matmuls,
// partune's CUDA FlashAttention, the unfused attention bmm's, pinned host copies), the cost
// model's GPU parameters fitted to them against the datasheet peaks, and the instance-type
// file that carries both: the datasheet file of the GPU (scenarios/clusters/
// h100-sxm-device.yaml, h200-device.yaml) with the measured values put in. No LibTorch in
// this header: the CLI includes it as is.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "partune/costmodel/calibration_fit.hpp"
#include "partune/costmodel/hardware.hpp"

namespace partune::kernels {

// What the GPU is (the CUDA driver's device 0, the one LibTorch uses) and what ran it.
struct GpuInfo {
  std::string date;  // ISO 8601, UTC
  std::string host;  // gethostname
  std::string name;  // cuDeviceGetName: "NVIDIA H100 80GB HBM3"
  int sm_count = 0;  // multiprocessors
  int compute_major = 0, compute_minor = 0;
  double memory_bytes = 0;  // cuDeviceTotalMem
  double l2_bytes = 0;
  int driver_version = 0;               // cuDriverGetVersion: 13000 is 13.0
  std::string libtorch;                 // TORCH_VERSION
  bool partune_cuda_attention = false;  // this build has partune's CUDA FlashAttention
  // What `flash_attention: true` runs on this GPU (kernels::fused_attention_kernel): "sdpa"
  // (LibTorch's fused attention) or "partune"; its fit is the profile's flash_efficiency.
  std::string attention_kernel = "partune";
  int host_cores = 0;                   // sched_getaffinity
  double host_memory_bytes = 0;         // /proc/meminfo MemTotal
};

// Why `calibrate --device cuda` cannot run here, as its one-line refusal, or "" when LibTorch
// sees a CUDA device.
std::string cuda_unavailable_reason();
// Device 0 as the CUDA driver describes it. Throws std::runtime_error when the driver
// cannot be asked (no libcuda.so.1, an error code).
GpuInfo gpu_info();
// The datasheet instance type (a scenarios/clusters/ name) for a device of this name:
// h100-sxm-device for an H100 SXM ("NVIDIA H100 80GB HBM3"), h200-device for an H200; ""
// for any other GPU (H100 PCIe and NVL, GH200 included: other clocks and memory).
std::string datasheet_instance_type_for(const std::string& device_name);

struct GpuCalibrationOptions {
  bool quick = false;  // fewer shapes, shorter timings: under a minute on an H100
  // Called before each benchmark with (done, total, what); may be empty.
  std::function<void(int, int, const char*)> progress;
};

// One timed call: `seconds` is the 20th percentile of five timed batches' means (as the CPU
// path, costmodel/quantile.hpp), min and max the fastest and slowest batch mean. Each batch
// is bracketed by torch::cuda::synchronize().
struct GpuTiming {
  double seconds = 0, min_seconds = 0, max_seconds = 0;
};
struct GpuGemmMeasurement {
  std::string dtype;  // bf16 (torch::matmul) or fp8_e4m3 (at::_scaled_mm, bf16 out)
  std::string shape;  // "square 4096", "tokens 8192 n 11008 k 4096", ...
  double m = 0, n = 0, k = 0;
  GpuTiming time;
};
struct GpuMemoryMeasurement {
  std::string kernel;  // copy, add, gelu, layer_norm (bf16)
  double elements = 0, bytes = 0;
  GpuTiming time;
};
struct GpuAttentionMeasurement {
  // qk, av: the unfused score bmm's (forward); flash: partune's CUDA FlashAttention, sdpa:
  // LibTorch's scaled_dot_product_attention; both causal, forward + backward.
  std::string kernel;
  double batch_heads = 0, seq = 0, head_dim = 0;
  GpuTiming time;
  // flash, sdpa: the timed calls also accumulated q, k and v's gradients into their .grad
  // (a record of calibrate before 2026-11-29: calibration::without_gradient_accumulation).
  bool gradients_accumulated = false;
};
struct GpuCopyMeasurement {
  std::string direction;  // host_to_device, device_to_host (pinned host memory)
  double bytes = 0;
  GpuTiming time;
};

// The cost model's GEMM rule (costmodel/op_cost.cpp's gemm_efficiency) fitted whole: the
// tile edge chosen from `tiles` by the smallest rms error, sm_count the device's.
struct GpuGemmFit {
  calibration::GemmFit fit;  // max_efficiency, k_half and the residual at the chosen tile
  double tile = 0, sm_count = 0;
  std::vector<std::pair<double, double>> rms_by_tile;  // (tile, rms relative error) of each candidate
};
struct Fp8GemmFit {
  double fp8_max_efficiency = 0;
  calibration::Residual residual;
};

struct GpuCalibration {
  GpuInfo gpu;
  std::string base_name;  // the datasheet instance type the profile starts from
  InstanceType base;      // as loaded
  bool quick = false;
  double seconds = 0;  // wall time of the whole calibration
  int records = 0;     // > 0: refitted from this many recorded runs (gpu_calibration_from_records)

  std::vector<GpuGemmMeasurement> gemm;  // bf16 and fp8_e4m3
  std::vector<GpuMemoryMeasurement> memory;
  std::vector<GpuAttentionMeasurement> attention;
  std::vector<GpuCopyMeasurement> copies;

  // Fits; a `*_measured` false keeps the datasheet value (a note says why).
  bool gemm_measured = false, fp8_measured = false, memory_measured = false, score_bmm_measured = false,
       flash_measured = false, sdpa_measured = false;
  GpuGemmFit gemm_fit;                // bf16, against the datasheet bf16 peak
  Fp8GemmFit fp8_fit;                 // against the datasheet fp8 peak, bf16's tile and k_half
  calibration::MemoryFit memory_fit;  // overhead + bytes / bandwidth per kernel
  double hbm_efficiency = 0;          // element-wise kernels / the datasheet hbm_bw
  calibration::ScoreBmmFit score_bmm_fit;
  calibration::FlashFit flash_fit;                      // partune's CUDA kernel
  calibration::FlashFit sdpa_fit;                       // LibTorch's SDPA
  // The fit of the kernel the backend runs (gpu.attention_kernel): gpu.attention.flash_efficiency.
  bool profile_flash_measured() const { return gpu.attention_kernel == "sdpa" ? sdpa_measured : flash_measured; }
  const calibration::FlashFit& profile_flash_fit() const { return gpu.attention_kernel == "sdpa" ? sdpa_fit : flash_fit; }
  double host_to_device_bw = 0, device_to_host_bw = 0;  // bytes/s, pinned
  std::vector<std::string> notes;                       // what was not measured or fitted, and why
};

// Runs every benchmark on device 0 and fits; `base_name` is the datasheet instance type
// (datasheet_instance_type_for). Throws std::runtime_error naming the benchmark that failed.
GpuCalibration calibrate_gpu(const GpuCalibrationOptions& options, const GpuInfo& gpu, const std::string& base_name);

// The measurements of recorded runs (calibrate.json files that `calibrate --device cuda
// --json` printed, e.g. docs/device-runs/*/calibrate.json) pooled into one calibration, as
// if measured in one: the same GPU and datasheet in every file (else std::invalid_argument
// naming the file), its facts from the last; not yet fitted (fit_gpu_calibration).
GpuCalibration gpu_calibration_from_records(const std::vector<std::string>& calibrate_json_files);

// The fits behind calibrate_gpu (gpu_profile_file.cpp, no LibTorch), on plain samples.
// The GEMM rule t = 2mnk / (peak max_eff occupancy(tile, sm_count) fill(tile) k/(k + k_half))
// + overhead: for each candidate tile the quantisation factor is known, so each sample
// becomes calibration::fit_gemm's (m / factor, n, k); the tile with the smallest rms wins.
GpuGemmFit fit_gpu_gemm(const std::vector<calibration::GemmSample>& samples, double peak_flops, double kernel_overhead,
                        double sm_count, const std::vector<double>& tiles = {64, 128, 256});
// FP8 under the same rule, the bf16 fit's tile, sm_count and k_half fixed: the one
// unknown fp8_max_efficiency (of the fp8 peak), in relative least squares.
Fp8GemmFit fit_fp8_gemm(const std::vector<calibration::GemmSample>& samples, double fp8_peak_flops,
                        double kernel_overhead, const GpuGemmFit& bf16);

// Every fit of c's raw measurements against c.base's datasheet peaks, in place (the
// *_measured flags, the fits, the notes). calibrate_gpu ends with it.
void fit_gpu_calibration(GpuCalibration& c);

// The measured fits that cannot go into a profile (calibrate.hpp's kMaxProfileFitRms; an
// efficiency of a datasheet peak must lie in (0, 1]), one line each; empty when it can be written.
std::vector<std::string> unusable_gpu_fits(const GpuCalibration& c);
// The datasheet instance type with the measured values in it, named `name`.
InstanceType measured_gpu_instance_type(const GpuCalibration& c, const std::string& name);
// The instance-type file: measured_gpu_instance_type through the scenario writer with a
// comment on each key (measured, or the datasheet file's), then `calibration:` with the
// provenance, the fits and the raw data (which the loader accepts and does not read).
std::string gpu_instance_type_yaml(const GpuCalibration& c, const std::string& name, const std::string& command_line);

}  // namespace partune::kernels
