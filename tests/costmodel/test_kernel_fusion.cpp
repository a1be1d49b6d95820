// What a GPU step costs besides its GEMMs: the memory-bound kernels by class, the host's
// dispatch floor and the optimizer as the stack runs it (layer_plan.hpp's KernelWork,
// op_cost.hpp), written out by hand from the stacks' kernels and the H100's profile.
#include <catch2/catch.hpp>

#include <string>

#include "partune/costmodel/error.hpp"
#include "partune/costmodel/layer_plan.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/scenario.hpp"
#include "partune/costmodel/scenario_writer.hpp"

using namespace partune;

namespace {

ModelSpec llama(int hidden, int ffn) {
  ModelSpec m;
  m.name = "tiny-llama";
  m.layers = 2;
  m.hidden = hidden;
  m.heads = 8;
  m.kv_heads = 8;
  m.ffn_hidden = ffn;
  m.vocab = 1024;
  m.seq_len = 256;
  m.norm = NormKind::rmsnorm;
  m.mlp = MlpKind::swiglu;
  m.positions = PositionKind::rope;
  m.bias = false;
  m.dropout = 0;
  return m;
}

PlanConfig config(KernelFusion fusion) {
  PlanConfig c;
  c.sequences = 2;
  c.flash_attention = true;
  c.precision = Precision::bf16;
  c.kernel_fusion = fusion;
  return c;
}

double total(const KernelWork& w) { return w.total_bytes(); }

}  // namespace

// Megatron-core with Transformer Engine runs each of these as one kernel reading and
// writing its tensors once (the fused plan, unchanged by the classes); PyTorch's eager
// operators one by one (backend/model/src/transformer_layer.cpp), each its own pass.
TEST_CASE("eager kernels move more bytes in more launches than fused ones", "[kernels][eager]") {
  const ModelSpec m = llama(512, 1536);
  const LayerPlan fused = transformer_layer_plan(m, config(KernelFusion::fused));
  const LayerPlan eager = transformer_layer_plan(m, config(KernelFusion::eager));
  const double T = 2 * 256, h = 512, f = 1536;
  // Fused RMSNorm: read and write T h bf16 values (4 T h bytes), two launches, all element-wise.
  const PlanOp& fn = fused.op(PlanOpRole::input_norm);
  CHECK(fn.forward_work.bytes[static_cast<int>(KernelClass::elementwise)] == 4 * T * h);
  CHECK(fn.forward_work.total_kernels() == 2);
  // Eager RMSNorm: x^2 (read, write), its mean (read), x * r and * w through the strided
  // kernel (read, write each): 7 T h values moved, six launches (two row-sized).
  const PlanOp& en = eager.op(PlanOpRole::input_norm);
  CHECK(total(en.forward_work) == 2 * 7 * T * h);
  CHECK(en.forward_work.bytes[static_cast<int>(KernelClass::strided)] == 2 * 4 * T * h);
  CHECK(en.forward_work.total_kernels() == 6);
  // SwiGLU over slices of fc1's output: silu(gate) then * up, both strided: 5 T f values.
  CHECK(eager.op(PlanOpRole::activation).forward_work.bytes[static_cast<int>(KernelClass::strided)] == 2 * 5 * T * f);
  // Rotary on queries and keys (T h each here): the strided products and the negation
  // (5 T h), the cat (2 T h), the sum (3 T h), each of the two.
  CHECK(total(eager.op(PlanOpRole::rotary).forward_work) == 2 * 2 * 10 * T * h);
  // Every eager pass moves at least what the fused one does.
  for (PlanOpRole r : {PlanOpRole::input_norm, PlanOpRole::rotary, PlanOpRole::activation, PlanOpRole::mlp_norm})
    CHECK(total(eager.op(r).forward_work) + total(eager.op(r).backward_work) >
          total(fused.op(r).forward_work) + total(fused.op(r).backward_work));
  // The GEMMs and the core are the same work either way.
  CHECK(eager.gemm_flops() == fused.gemm_flops());
  CHECK(eager.attention_flops() == fused.attention_flops());
  // torch.compile's kernels are priced as the fused ones.
  const LayerPlan compiled = transformer_layer_plan(m, config(KernelFusion::compiled));
  CHECK(total(compiled.op(PlanOpRole::input_norm).forward_work) == total(fn.forward_work));
}

// A class's bytes at its own rate: the H100's strided kernel (1.36 TB/s profiled) is half
// the element-wise rate.
TEST_CASE("each kernel class streams at its own rate", "[kernels][eager]") {
  const GpuProfile h100 = load_instance_type("p5.48xlarge").gpu;
  KernelWork w;
  w.add(KernelClass::strided, 1e9, 1);
  w.add(KernelClass::elementwise, 1e9, 1);
  const double expected = 1e9 / (3350e9 * 0.405) + 1e9 / (3350e9 * 0.8144) + 2 * 2.4e-6;
  CHECK(kernel_work_time(h100, w) == Approx(expected).epsilon(1e-12));
  // A profile without the class's own rate runs it at hbm_efficiency (A100: not measured).
  const GpuProfile a100 = load_instance_type("p4d.24xlarge").gpu;
  CHECK(kernel_class_efficiency(a100, KernelClass::strided) == a100.hbm_efficiency);
}

// An op of short kernels waits for the host: 64 launches of a few bytes each take 64
// dispatches (6.241 us on the H100's host) rather than 64 device gaps (2.4 us), unless CUDA
// graphs replay them.
TEST_CASE("short kernels leave the GPU waiting for the host's dispatch", "[kernels][dispatch]") {
  const GpuProfile h100 = load_instance_type("p5.48xlarge").gpu;
  LayerPlan plan;
  plan.part = PlanPart::embedding;  // no per-layer host overhead
  PlanOp op;
  op.kind = PlanOpKind::memory_bound;
  op.forward_work.add(KernelClass::elementwise, 64 * 1024, 64);
  plan.ops.push_back(op);
  const double device = 64 * 1024 / (3350e9 * 0.8144) + 64 * 2.4e-6;
  const LayerTime queued = plan_time(h100, plan, Precision::bf16, false);
  CHECK(queued.elementwise_fwd == Approx(64 * 6.241e-6).epsilon(1e-9));
  CHECK(queued.idle_fwd == Approx(64 * 6.241e-6 - device).epsilon(1e-9));
  plan.host_dispatch = false;  // CUDA graphs
  const LayerTime graphed = plan_time(h100, plan, Precision::bf16, false);
  CHECK(graphed.elementwise_fwd == Approx(device).epsilon(1e-9));
  CHECK(graphed.idle_fwd == 0);
}

// torch.optim's fused Adam over fp32 masters (partune's backend on a GPU), a 1.3B-parameter
// model in 292 tensors on the H100: the kernel reads the fp32 gradient and reads and writes
// the master and two moments (4 + 24 bytes a parameter); the gradients are converted to fp32
// first (2 + 4 bytes, LibTorch's unrolled copy, at the strided rate) and the masters copied
// back (4 + 2 bytes, vectorised), a kernel a tensor each. Measured on the 1.3B job: 23.4 ms
// (docs/gpu.md), of which the fused kernel 14.1 ms and the conversions 8.1 ms (the profile).
TEST_CASE("the optimizer as torch runs it converts gradients and masters", "[kernels][optimizer]") {
  const GpuProfile h100 = load_instance_type("p5.48xlarge").gpu;
  TrainingConfig t;
  t.precision = Precision::bf16;
  t.optimizer_impl = OptimizerImpl::torch;
  const double P = 1.3158e9;
  const int tensors = 292;
  const double step = P * 28 / (3350e9 * 0.8144) + 4 * 2.4e-6;
  const double to_fp32 = P * 6 / (3350e9 * 0.405) + tensors * 2.4e-6;
  const double back = P * 6 / (3350e9 * 0.9134) + tensors * 2.4e-6;
  const OptimizerTime o = optimizer_times(h100, t, P, tensors);
  CHECK(o.step == Approx(step).epsilon(1e-9));
  CHECK(o.conversions == Approx(to_fp32 + back).epsilon(1e-9));
  CHECK(o.step + o.conversions == Approx(0.0234).epsilon(0.05));  // the measured step, within 5%
  // Megatron's: one pass reading the 16-bit gradient and writing the 16-bit weight too.
  t.optimizer_impl = OptimizerImpl::fused;
  CHECK(optimizer_time(h100, t, P, tensors) == Approx(P * 28 / (3350e9 * 0.8144) + 4 * 2.4e-6).epsilon(1e-9));
}

TEST_CASE("kernel_fusion, optimizer_impl and cuda_graphs are job keys", "[kernels][scenario]") {
  const std::string base = "kind: job\nmodel: gpt2-large\ncluster: {instance_type: p5.48xlarge, nodes: 1}\n";
  const Job j = parse_job(base + "training: {global_batch: 8, precision: bf16, kernel_fusion: eager, "
                                 "optimizer_impl: torch, cuda_graphs: true}\n",
                          "eager.yaml");
  CHECK(j.training.kernel_fusion == KernelFusion::eager);
  CHECK(j.training.optimizer_impl == OptimizerImpl::torch);
  CHECK(j.training.cuda_graphs);
  // Written back as read.
  const Job again = parse_job(job_yaml(j, "a test"), "again.yaml");
  CHECK(again.training.kernel_fusion == KernelFusion::eager);
  CHECK(again.training.optimizer_impl == OptimizerImpl::torch);
  CHECK(again.training.cuda_graphs);
  // Defaults: Megatron's.
  const Job d = parse_job(base + "training: {global_batch: 8}\n", "default.yaml");
  CHECK(d.training.kernel_fusion == KernelFusion::fused);
  CHECK(d.training.optimizer_impl == OptimizerImpl::fused);
  CHECK_FALSE(d.training.cuda_graphs);
  try {
    (void)parse_job(base + "training: {global_batch: 8, kernel_fusion: jit}\n", "bad.yaml");
    FAIL("expected a ScenarioError");
  } catch (const ScenarioError& e) {
    CHECK(e.file() == "bad.yaml");
    CHECK(std::string(e.what()).find("kernel_fusion") != std::string::npos);
    CHECK(std::string(e.what()).find("eager") != std::string::npos);
  }
}
