#pragma once
// `partune calibrate`: micro-benchmarks of this machine through the libraries the backend
// uses (LibTorch fp32 CPU kernels, c10d Gloo over loopback, libfabric), the cost model's
// parameters fitted to them (costmodel/calibration_fit.hpp), and the instance-type file
// that carries both. No LibTorch in this header: the CLI includes it as is.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "partune/costmodel/calibration_fit.hpp"
#include "partune/costmodel/hardware.hpp"

namespace partune::kernels {

struct CalibrationOptions {
  bool quick = false;   // fewer and smaller shapes, shorter timings: under a minute on 2 cores
  int max_threads = 0;  // GEMM thread sweep: 1 and this (0: the cores this process may use)
  // Called before each benchmark with (done, total, what); may be empty.
  std::function<void(int, int, const char*)> progress;
};

// What the machine is, for the file's header.
struct MachineInfo {
  std::string date;          // ISO 8601, UTC
  std::string host;          // gethostname
  std::string cpu_model;     // /proc/cpuinfo "model name"
  int cores = 0;             // CPUs this process may run on (affinity)
  double memory_bytes = 0;   // /proc/meminfo MemTotal
  std::string libtorch;      // TORCH_VERSION
  std::string gloo;          // the installed package's version (Gloo has no version macro)
  std::string libfabric;     // fi_version(), or why there is none
  std::string blas_core;     // openblas_get_corename() when LibTorch runs on OpenBLAS, else empty
};

// Raw measurements. Times are seconds per call: the 20th percentile of five timed batches' means.
struct GemmMeasurement {
  int threads = 1;
  std::string shape;  // "qkv h768 t1024", ..., "square 256"
  double m = 0, n = 0, k = 0, seconds = 0;
};
struct MemoryMeasurement {
  std::string kernel;  // add, gelu, layer_norm, softmax, copy
  int threads = 1;
  double elements = 0, bytes = 0, seconds = 0;
};
struct AttentionMeasurement {
  std::string product;  // qk (Q K^T) or av (A V)
  double heads = 0, seq = 0, head_dim = 0, seconds = 0;
};
// FlashAttention (flash_attention.hpp) forward + backward, causal, fp32, 1 thread.
struct FlashMeasurement {
  double heads = 0, seq = 0, head_dim = 0, seconds = 0;
};
// One kernel timed alone on one core and on every core at once (each core its own copy,
// one LibTorch thread each): how much a core slows down when all compute.
struct AllBusyMeasurement {
  std::string kernel;  // "qkv h512 t1024", ..., "gelu 4194304"
  int threads = 1;     // cores busy in the second timing
  double alone_seconds = 0, busy_seconds = 0;  // per call, on one thread
};
struct TransferMeasurement {
  std::string kind;               // all_reduce, all_gather, send_recv
  double bytes = 0, seconds = 0;  // send_recv: one way (half the ping-pong round trip)
};
struct FabricProbe {
  bool ok = false;
  std::string provider, fabric, endpoint_type;  // what was measured
  std::string note;                             // why nothing worked, or what failed first
  std::vector<TransferMeasurement> pingpong;    // kind "send_recv", one way
};

// The backend's transformer layer alone, one sequence of `tokens` tokens (backend's
// time_layer: cli/cmd_calibrate.cpp runs it, kernels cannot see the backend): the medians
// of its forward and of its backward.
struct LayerSample {
  int tokens = 0;
  double forward = 0, backward = 0;  // s
};
// The layer those samples ran (gpt-val's: the validation suite's model) and what it cost
// beyond its plan's time on the fitted profile (GpuProfile::layer_overhead_fwd/_bwd): the
// part of measured - planned that does not grow with the tokens (the intercept of its
// least-squares line at zero tokens, at least 0), 0 when nothing was measured.
struct LayerOverhead {
  int hidden = 256, heads = 4, ffn_hidden = 1024;
  std::vector<LayerSample> samples;
  double forward = 0, backward = 0;  // s
};
// `layer`'s overheads against the plan of its shape on `gpu` (whose own layer overheads
// are left out), in fp32 with the standard attention core, as the CPU backend runs it.
LayerOverhead fit_layer_overhead(LayerOverhead layer, const GpuProfile& gpu);

// A latency-bandwidth fit of one collective kind over one size range.
struct NamedAlphaBeta {
  std::string kind;   // all_reduce, all_gather, send_recv, all (the cost model's joint fit), fabric
  std::string range;  // all, small (<= 64 KiB), large (>= 1 MiB)
  calibration::AlphaBetaFit fit;
};

struct Calibration {
  MachineInfo machine;
  bool quick = false;
  int max_threads = 1;
  double seconds = 0;  // wall time of the whole calibration

  // The fp32 peak the efficiencies are fitted against: the FMA loop's rate, or the best
  // matmul measured where that is higher (a matmul cannot beat the peak, so an FMA loop
  // below it was slowed by something the kernels were not).
  double fma_peak_flops = 0;          // one core (the profile's fp32 peak)
  double fma_peak_flops_all = 0;      // every thread of the sweep at once
  double fma_loop_flops = 0;          // what the FMA loop read on one core
  double fma_loop_flops_all = 0;      // and on every thread
  std::string peak_source = "FMA loop";  // or "best matmul"
  std::string fma_isa;                // avx512f, avx2+fma, or sse2 (no FMA)
  std::vector<GemmMeasurement> gemm;
  std::vector<MemoryMeasurement> memory;
  std::vector<AttentionMeasurement> attention;
  std::vector<FlashMeasurement> flash;
  std::vector<AllBusyMeasurement> all_busy;
  std::vector<TransferMeasurement> gloo;
  FabricProbe fabric;

  // Fits (one rank = one core, one thread, unless said otherwise).
  calibration::MemoryFit memory_fit;        // 1 thread
  double copy_bandwidth_all = 0;            // bytes/s, the copy kernel with every thread
  double hbm_efficiency = 0;
  // Sum of the all_busy kernels' alone times over the sum of their busy times (one call of
  // each of a layer's kernels): the speed a core keeps while every core computes.
  double all_busy_speed = 1;
  calibration::GemmFit gemm_fit;            // 1 thread
  calibration::GemmFit gemm_fit_all;        // max_threads threads against max_threads x the core peak
  calibration::ScoreBmmFit attention_fit;
  calibration::FlashFit flash_fit;          // 1 thread: gpu.attention.flash_efficiency
  std::vector<NamedAlphaBeta> transfer_fits;
  const calibration::AlphaBetaFit& transfer(const std::string& kind, const std::string& range = "all") const;
  double ring_efficiency = 1, gather_efficiency = 1;  // collectives' bandwidth / point-to-point bandwidth
  std::vector<std::string> notes;  // fits that could not be made, and why
  LayerOverhead layer;             // samples filled by the caller (cli), fitted by the profile
};

// Runs every benchmark and fit. Throws std::runtime_error naming the benchmark that failed.
Calibration calibrate(const CalibrationOptions& options);

// The largest rms relative error a fit may have and still go into a profile. A healthy
// 2-core machine measures about 13% (GEMM) and 25% (attention); a fit that explains its
// samples this badly describes no kernel the estimator would time.
constexpr double kMaxProfileFitRms = 0.5;
// The largest efficiency (of the separately measured FMA peak) a fit may report. A kernel
// at full speed measured against a peak timed in another run lands either side of 1: seen
// at 1.0003 (attention bmm, AMD EPYC, avx512) and 1.09 (GEMM asymptote fitted from
// calibrate --quick's few shapes under ASan, 0.88-0.90 in the Release build on the same
// machine). Up to this figure the profile writes the efficiency as 1; above it the fit is
// refused (a peak or a FLOP count is wrong, as with the 7.66 that was once clamped).
constexpr double kMaxFitEfficiency = 1.1;
// The fits the profile is built from that cannot be used (an efficiency outside
// (0, kMaxFitEfficiency],
// an rms error above kMaxProfileFitRms), one line each naming the fit and why; empty when
// the profile can be written.
std::vector<std::string> unusable_fits(const Calibration& c);

// The instance type the calibration describes: the fitted values, the machine's, and
// local-cpu.yaml's reasoning for what nothing here measures. Values the loader insists on
// being positive or in (0, 1] are clamped there.
InstanceType measured_instance_type(const Calibration& c, const std::string& name);

// The instance-type file: measured_instance_type written by the scenario writer
// (costmodel/scenario_writer.hpp) with a comment on each key saying where its value comes
// from, then a `calibration:` mapping with the provenance, the fits and the raw data
// (which the loader accepts and does not read).
std::string instance_type_yaml(const Calibration& c, const std::string& name, const std::string& command_line);

}  // namespace partune::kernels
