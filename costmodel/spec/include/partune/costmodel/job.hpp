#pragma once
// A training job: model + cluster + training settings + parallel configuration, with
// SageMaker model parallel's knobs and names.
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include "partune/costmodel/hardware.hpp"
#include "partune/costmodel/model.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune {

enum class Optimizer { adam, sgd };
// gpipe = GPipe (job files: `simple`), one_f_one_b = 1F1B, interleaved when virtual_stages > 1
// (job files: `interleaved`, SageMaker model parallel's names, kept), zb_h1 = the
// zero-bubble ZB-H1 schedule (Qi et al. 2023): backward split into input gradients (B)
// and weight gradients (W), W deferred into the drain's bubbles; zbv and dualpipev: two
// chunks a stage placed in a V (model_chunk), backward split as ZB-H1 (schedule.hpp).
enum class PipelineSchedule { gpipe, one_f_one_b, zb_h1, zbv, dualpipev };
// The V-shaped schedules: chunk 0 of stage s runs model chunk s, chunk 1 model chunk
// 2p - 1 - s.
inline bool v_shaped(PipelineSchedule s) { return s == PipelineSchedule::zbv || s == PipelineSchedule::dualpipev; }
// Whether the schedule computes input and weight gradients apart (the zero-bubble ones).
inline bool splits_backward(PipelineSchedule s) { return s == PipelineSchedule::zb_h1 || v_shaped(s); }
// `op`: torchtitan's op-level selective checkpointing (selective_ac_option "op"): each layer
// keeps its input, the attention kernel's output and every other matmul's output (the
// first, third, ... of its separate projections), and its backward repeats the rest
// (layer_plan.hpp's recompute_share). `dots`: JAX's checkpoint_dots policy as MaxText's
// remat_policy minimal / minimal_flash runs it: each layer keeps its input, every weight
// matmul's output and the attention kernel's output, and its backward repeats the
// element-wise ops alone.
enum class Checkpointing { none, selective, full, op, dots };
// Megatron-Core's recompute_modules (transformer_config.py): what `selective` checkpointing
// recomputes, by module. core_attn: the attention core (Korthikanti et al.'s selective
// recomputation, Megatron's default list); mla_up_proj: multi-head latent attention's up
// projections and rotary (their outputs, the core's Q, K and V, are freed once the core has
// read them); layernorm: the two norms (their outputs, the next GEMMs' inputs, freed);
// mlp: a dense layer's MLP (its input kept); moe: a layer with experts' MLP (its input
// kept); moe_act: the experts' activation (its output, the second GEMM's input, freed);
// shared_experts: the shared experts' MLP (its input kept).
enum class RecomputeModule : std::uint8_t { core_attn, mla_up_proj, layernorm, mlp, moe, moe_act, shared_experts };
// A set of them, bit i for the module of value i.
using RecomputeModules = std::uint8_t;
constexpr RecomputeModules module_bit(RecomputeModule m) { return static_cast<RecomputeModules>(1u << static_cast<int>(m)); }
inline constexpr RecomputeModules kDefaultRecomputeModules = module_bit(RecomputeModule::core_attn);
constexpr bool has_module(RecomputeModules set, RecomputeModule m) { return (set & module_bit(m)) != 0; }
// `nccl`: what NCCL's tuner picks for the collective, its size and its group (the fastest of
// its algorithms on idle links: collective.hpp's resolved_algorithm), as a job that leaves
// NCCL_ALGO unset runs it.
// `nvls`: NVLink SHARP (the switch reduces), an all-reduce inside one NVLink domain of an
// instance whose fabric has it (collectives.nccl.nvls_efficiency); elsewhere a ring.
enum class CollectiveAlgorithm { ring, tree, hierarchical, all_to_all, nccl, nvls };
// Which pipeline stage runs the LM head (logits and loss). `first` is SMP's rule for tied
// embeddings: modules that share a parameter sit on the same device, so the head reuses
// stage 0's embedding weight; the last stage sends its output to stage 0 and gets the
// gradient back (docs/programs.md §4.7).
enum class LmHeadStage { last, first };
// Sharded data parallelism as a given system runs it (sharding.hpp): SageMaker model
// parallel's (MiCS, built on DeepSpeed's ZeRO-3), DeepSpeed ZeRO-3, PyTorch FSDP.
enum class ShardingFlavor { smp, zero3, fsdp, fsdp2 };
// FSDP's backward_prefetch: the next unit's all-gather issued before the current unit's
// gradient computation (pre), after it (post), or when the unit is reached (none).
enum class BackwardPrefetch { pre, post, none };
// The precision of the cross-entropy over the logits: fp32 (Megatron's default: the 16-bit
// logits are cast to an fp32 copy the loss works on in place) or the training precision,
// in place over the logits (Megatron's --fp16-lm-cross-entropy; a module cast to half
// precision as a whole, as SMP's fp16/bf16 modes do).
enum class LossPrecision { fp32, training };
// How the stack runs the work between the GEMMs (norms, rotary positions, activations, bias,
// dropout and residual adds, the attention's layout copies): `fused`, the fused kernels of
// Megatron-core with Transformer Engine or Apex (a norm, an activation, a
// bias-dropout-residual add each one kernel reading and writing its tensors once); `eager`,
// PyTorch's eager operators one by one as partune's LibTorch backend runs them (a norm or
// rotary as several element-wise kernels, LibTorch's non-vectorised kernel where an operand
// is broadcast or strided, bias adds and layout copies apart: layer_plan.hpp's eager work);
// `compiled`, torch.compile's generated kernels, priced as the fused ones (Inductor fuses
// each of these groups into one kernel).
enum class KernelFusion { fused, eager, compiled };
// The optimizer step as the stack runs it over fp32 master weights: `fused`, one kernel
// reading fp32 gradients accumulated in fp32 buffers and writing the 16-bit weights
// (Megatron-core's distributed optimizer with Apex/TE FusedAdam); `torch`, torch.optim's
// fused Adam over fp32 masters with the 16-bit gradients converted to fp32 first and the
// masters copied back to the 16-bit weights after, one kernel a parameter tensor each
// (partune's LibTorch backend on a GPU); `foreach`, torch.optim's foreach Adam in place of
// the fused kernel, each of its eight list operations a pass over fp32 state (the
// backend's multi_tensor_adam.cpp), with the same conversions; `per_tensor`, LibTorch's
// torch::optim::Adam looping over the tensors, the foreach step's passes tensor by tensor
// (ten kernels a tensor, each launched by the host).
enum class OptimizerImpl { fused, torch, foreach, per_tensor };
// How a fused stack (Transformer Engine) scales its per-tensor fp8 GEMM operands
// (precision fp8; mxfp8 and fp4 are block-scaled, their scales computed in the cast):
// `delayed`, TE's DelayedScaling (its default): each operand's scale from the amax history,
// the new amax taken in the same fused cast-transpose pass; `current`, TE's
// Float8CurrentScaling (torchao's tensorwise, NeMo's "current" recipes): the tensor's amax
// read first, a pass of its own, then the cast-transpose.
enum class Fp8Recipe { delayed, current };
// Context parallelism's exchange, as Megatron-core's cp_comm_type names it: p2p passes
// each rank's keys and values around a ring of the context group, each step beside a
// block of the attention core (ring attention; backward passes them again with their
// gradients); a2a swaps the sequence split for a split of the heads around the core
// (all-to-alls of Q, K, V and of the context: DeepSpeed-Ulysses); allgather gathers the
// keys and values before the core and reduce-scatters their gradients after it;
// a2a_p2p ("a2a+p2p") is Megatron-core's hierarchical mix: a2a inside sub-groups of
// context_a2a_degree consecutive context ranks, p2p around the ring of the sub-groups'
// like members (hierarchical_context_parallel_sizes [a2a, p2p]).
enum class ContextComm { p2p, a2a, allgather, a2a_p2p };
// Megatron-Core's MoE token dispatchers (moe_token_dispatcher_type; token_dispatcher.py):
// `alltoall` sends each rank's routed token copies over the expert group and gathers them
// over the experts' tensor group; `allgather` (Megatron's default) all-gathers every
// rank's tokens over the expert-tensor x expert block, each rank keeping the rows of its
// experts, and reduce-scatters the results back; `deepep` (Megatron's flex dispatcher with
// DeepEP, --moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep) sends a
// token once to each other node its experts are on and forwards the copies inside the node
// (collective.hpp's node_aware_exchange_phases), expert tensor degree 1.
enum class MoeDispatcher { alltoall, allgather, deepep };

const char* to_string(Optimizer o);
const char* to_string(PipelineSchedule s);
const char* to_string(Checkpointing c);
const char* to_string(CollectiveAlgorithm a);
const char* to_string(LmHeadStage h);
const char* to_string(ShardingFlavor f);
// FSDP's flavours: the whole layer is one gather unit (no bucket or persistence knobs).
inline bool layer_unit(ShardingFlavor f) { return f == ShardingFlavor::fsdp || f == ShardingFlavor::fsdp2; }
const char* to_string(BackwardPrefetch b);
const char* to_string(LossPrecision p);
const char* to_string(ContextComm c);

// The knobs of parallel.sharding (docs/scenarios.md). -1 = the flavour's public default
// (sharding.hpp's sharding_settings).
struct ShardingConfig {
  double prefetch_bucket_size = -1;         // elements gathered ahead (smp, zero3)
  double reduce_bucket_size = -1;           // elements per gradient reduce-scatter (smp, zero3)
  double param_persistence_threshold = -1;  // tensors below it stay whole on every rank (smp, zero3)
  int hierarchical_allgather = -1;          // 0 / 1; -1: yes for smp, no otherwise
  BackwardPrefetch backward_prefetch = BackwardPrefetch::pre;  // fsdp, fsdp2
  // 0 / 1; -1: yes for fsdp2, no otherwise. Each gathered unit is copied out of the
  // all-gather buffer into its parameters, and its gradients into the reduce-scatter's
  // input, on the compute stream (sharding.hpp).
  int gather_copies = -1;
};

struct TrainingConfig {
  int global_batch = 0;          // sequences per optimizer step
  Precision precision = Precision::fp16;
  Optimizer optimizer = Optimizer::adam;
  int gradient_accumulation = 1; // sequential forward/backward passes per step
  LossPrecision loss_precision = LossPrecision::fp32;
  KernelFusion kernel_fusion = KernelFusion::fused;
  OptimizerImpl optimizer_impl = OptimizerImpl::fused;
  Fp8Recipe fp8_recipe = Fp8Recipe::delayed;  // kernel_fusion fused/compiled with precision fp8
  // The step's kernels are replayed from CUDA graphs: the host's per-kernel dispatch
  // (GpuProfile::dispatch) leaves no gap (NeMo's recipes with CUDA graphs).
  bool cuda_graphs = false;
  // The flash kernel the stack runs when parallel.flash_attention is on (hardware.hpp's
  // AttentionKernel: flash1, flash2, flash3, cudnn, partune); unset: the GPU profile's own
  // (gpu.attention.kernel). A kernel the profile has no curve for is refused.
  std::optional<AttentionKernel> attention_impl;
  // The optimizer's moments (Adam's two, SGD's momentum) in this format: Megatron's
  // precision-aware optimizer (--use-precision-aware-optimizer with --exp-avg-dtype and
  // --exp-avg-sq-dtype; its model zoo's fp8 and mxfp8 recipes set both to bf16), DeepSeek-V3's
  // BF16 moments (arXiv:2412.19437 §3.3.3). fp32 (the default), bf16 or fp16; the master
  // weights stay fp32.
  Precision moment_precision = Precision::fp32;
  // Bytes of one moment element (4, or 2 in bf16/fp16).
  double moment_bytes() const { return moment_precision == Precision::fp32 ? 4.0 : 2.0; }
};

struct ParallelConfig {
  int pipeline_parallel_degree = 1;
  int tensor_parallel_degree = 1;
  int sharded_data_parallel_degree = 1;
  // Expert parallelism (mixture-of-experts models): each expert group of this many
  // data-parallel ranks holds experts / expert_parallel_degree experts of every MoE
  // layer on each rank, and exchanges tokens with all-to-alls (dispatch, combine). As in
  // Megatron-core, an expert group is `expert_parallel_degree` consecutive ranks of a
  // data-parallel group (tensor ranks vary fastest, then expert ranks, then the rest of
  // data parallelism), the experts are tensor-parallel like the dense MLP, and the
  // experts' gradients are reduced over the expert-data-parallel group (the same expert
  // rank in every expert group of the data-parallel group).
  int expert_parallel_degree = 1;
  // MoE parallel folding (Megatron-Core's expert_tensor_parallel_size, Liu et al. 2025,
  // arXiv:2504.14960): the experts' own tensor degree, independent of the attention's.
  // The expert grid is drawn from a stage's tensor x context x data ranks (Megatron's
  // order tp-cp-dp, flattened tensor fastest): expert-tensor ranks fastest, then expert
  // ranks, then the expert-data-parallel rest (etp-ep-edp). 0: the tensor degree
  // (Megatron's default), which gives the groups described above. A degree other than the
  // tensor degree needs sequence_parallel when tensor_parallel_degree > 1.
  int expert_tensor_parallel_degree = 0;
  // How the tokens reach the experts (MoeDispatcher above): partune's default alltoall.
  MoeDispatcher moe_token_dispatcher = MoeDispatcher::alltoall;
  // Megatron-Core's overlap_moe_expert_parallel_comm (with delay_wgrad_compute): the
  // experts' token exchanges of one micro-batch run beside the other micro-batch's
  // compute (1F1B's merged forward and backward), the kernels slowed by the SMs the
  // exchange holds. Modelled as the exchanges running beside their layer's kernels.
  bool moe_a2a_overlap = false;
  // Context parallelism (Megatron-core): every sequence split over this many ranks, each
  // holding s / cp tokens in every layer (two chunks of s / 2cp, i and 2cp - 1 - i, so
  // that causal attention's work is even), exchanging keys and values by cp_comm_type
  // around the attention core. A context group is `context_parallel_degree` consecutive
  // ranks of the data axis (Megatron's order tp-cp-ep-dp-pp: tensor ranks fastest, then
  // context, then data); the context ranks hold the same weights, so gradients are
  // reduced, and optimizer state and sharded parameters split, over data x context.
  int context_parallel_degree = 1;
  ContextComm cp_comm_type = ContextComm::p2p;
  // a2a+p2p only: the a2a sub-group's size (Megatron's hierarchical_context_parallel_sizes
  // [a2a, cp / a2a]); 0 otherwise.
  int context_a2a_degree = 0;
  int microbatches = 1;          // per pipeline pass (per accumulation step)
  int active_microbatches = 0;   // 0 = pipeline_parallel_degree + 2 (SMP's default)
  PipelineSchedule pipeline = PipelineSchedule::one_f_one_b;
  int virtual_stages = 1;        // model chunks per rank (interleaved 1F1B when > 1)
  PlacementOrder placement_strategy;  // default DPT (SMP's "cluster")
  Checkpointing activation_checkpointing = Checkpointing::none;
  // Under `selective`: the modules recomputed (Megatron's --recompute-modules; its default
  // is the attention core alone).
  RecomputeModules recompute_modules = kDefaultRecomputeModules;
  bool offload_activations = false;
  int activation_loading_horizon = 4;  // layers reloaded ahead of backward
  // ZeRO-Offload / FSDP CPU offload: the optimizer state, fp32 master weights and the
  // gradient shard live in host memory and the optimizer steps on the host's cores; the
  // gradient shard goes down and the updated 16-bit weights come back over PCIe.
  bool offload_optimizer = false;
  // ZeRO-3 offload_param / FSDP offload_params: the 16-bit parameter shard lives in host
  // memory too and is copied to the device before each all-gather (sharded DP only).
  bool offload_parameters = false;
  bool shard_optimizer_state = false;
  // ZeRO-2 (DeepSpeed stage 2; FSDP's SHARD_GRAD_OP shards the same model states): with
  // shard_optimizer_state, each rank keeps only its 1 / dp slice of the gradients too, so
  // every micro-batch's backward reduce-scatters its buckets into that slice instead of
  // accumulating whole gradients until the step's last micro-batch. Less memory, more
  // data-parallel traffic under gradient accumulation (the same with one micro-batch).
  bool shard_gradients = false;
  bool flash_attention = false;
  // Megatron's sequence parallelism (Korthikanti et al. 2022): the norms, dropouts and
  // residuals run on s/t tokens per tensor rank; each tensor all-reduce becomes a
  // reduce-scatter + all-gather. Needs tensor_parallel_degree > 1.
  bool sequence_parallel = false;
  // Megatron-core's tp_comm_overlap (Transformer Engine's userbuffers): each sequence-
  // parallel all-gather and reduce-scatter runs in chunks beside the GEMM it feeds or
  // follows rather than before or after it; the GEMMs lose the multiprocessors the
  // communication holds (the instance's ring compute_overlap: 1 - ctas / SMs). Needs
  // sequence_parallel, as Megatron's does. Megatron-core's default: off; NeMo 2's LLM
  // recipes turn it on with tensor parallelism.
  bool tp_comm_overlap = false;
  // Megatron-core's overlap_p2p_comm: each pipeline receive is posted before the compute
  // ahead of it, so the activation (or gradient) travels while that compute runs instead
  // of after it. Megatron-core's and NeMo's default: off.
  bool overlap_p2p_comm = false;
  // Megatron-core's grad_reduce_in_fp32: gradients are accumulated in an fp32 buffer and
  // reduced (all-reduce, reduce-scatter, the step-end sums) in fp32, twice a 16-bit
  // gradient's bytes. Megatron-LM turns it on for bf16, torchtitan's FSDP reduces in fp32
  // by default; Megatron-core's own default and partune's: off.
  bool grad_reduce_in_fp32 = false;
  CollectiveAlgorithm sharded_collective = CollectiveAlgorithm::ring;
  ShardingFlavor sharding_flavor = ShardingFlavor::smp;
  ShardingConfig sharding;
  CollectiveAlgorithm data_parallel_collective = CollectiveAlgorithm::ring;
  // Uneven stages: the transformer layers of each pipeline stage (pipeline_parallel_degree
  // entries, virtual_stages 1), or with virtual stages of each model chunk in model order
  // (pipeline_parallel_degree x virtual_stages entries; model chunk k runs on stage k mod
  // pp as its chunk k / pp). They add up to model.layers; every entry >= 1 except the
  // model's first and last chunk, which may hold 0 (the embedding alone, the head alone:
  // Llama 3's stages). Empty: layers / (pp x virtual_stages) in every chunk.
  std::vector<int> stage_layers;
  // Megatron-Core's --pipeline-model-parallel-layout as the job gave it (pipeline_layout.hpp):
  // stage_layers and virtual_stages are read from it. Empty when not given.
  std::string pipeline_layout;
  LmHeadStage lm_head_stage = LmHeadStage::last;
  // Under selective or full checkpointing, how many layers of each stage (its first
  // ones, in chunk order) are checkpointed and recomputed; the others keep their full
  // activations. -1 = every layer. Clamped to the stage's layers.
  int checkpointed_layers = -1;
};

// The model chunk (virtual stage, in model order) that chunk `chunk` of pipeline stage
// `stage` runs: Megatron's interleaving, chunk * p + stage, or in a V (v_shaped) stage s
// for chunk 0 and 2p - 1 - s for chunk 1. The one mapping the layers' split, the
// schedules, the programs and the backend read; chunk_position is its inverse.
int model_chunk(const ParallelConfig& pc, int stage, int chunk);
struct ChunkPosition {
  int stage = 0, chunk = 0;
};
ChunkPosition chunk_position(const ParallelConfig& pc, int model_chunk);

// Layers of a span of the model by kind: dense, or with experts.
struct LayerMix {
  int dense = 0, moe = 0;
  int total() const { return dense + moe; }
};
LayerMix layer_mix(const ModelSpec& m, int first, int count);

struct Job {
  std::string name;
  ModelSpec model;
  Cluster cluster;
  TrainingConfig training;
  ParallelConfig parallel;
  // The job file's `search:` section: knobs the autotuner may only vary within these
  // values, as "key=v1,v2" (same form as `partune search --fix`).
  std::vector<std::string> search_restrictions;
  // The job file's `sweep:` section: the keys `partune sweep` varies and their values,
  // as "key=v1,v2" (same form as its --vary).
  std::vector<std::string> sweep_axes;

  int world_size() const { return cluster.gpu_count(); }
  // Bytes of a gradient element as it is kept and reduced: 4 under grad_reduce_in_fp32,
  // else the training precision's.
  double gradient_bytes_per_element() const;
  // Data-parallel degree derived from the others: world / (pp * tp * cp), the replicas
  // that split the global batch.
  int data_parallel_degree() const;
  // The placement's data axis, world / (pp * tp): data x context ranks. Gradients are
  // reduced over it (Megatron's data-parallel group with context), optimizer state is
  // sharded over it, and sharded data parallelism, the expert groups and the context
  // groups are runs of consecutive members of it. Equal to data_parallel_degree without
  // context parallelism.
  int data_context_degree() const;
  int microbatch_size() const;  // sequences per micro-batch per data-parallel rank
  // The share of a stage's parameters whose optimizer state (and step) is this rank's:
  // 1 / sharded degree when sharded, 1 / data_context_degree with shard_optimizer_state (ZeRO-1),
  // else 1. Memory, the programs' optimizer step and the estimator all use it.
  double optimizer_shard_fraction() const;

  // --- Layers per pipeline stage and chunk (parallel.stage_layers, or even).
  // Chunk c of stage s is model chunk c * pp + s (Megatron interleaving).
  int layers_in_chunk(int stage, int chunk) const;
  int layers_on_stage(int stage) const;  // over its chunks
  // Whether the stages between the first and the last hold the same work, so that one of
  // them stands for all: even chunks (no stage_layers), or a dense model's stage_layers
  // whose entries differ only at the first and the last chunk (Llama 3's stages).
  bool uniform_middle_stages() const;
  // True when stage_layers lists the model's chunks (pp x virtual_stages entries).
  bool chunk_layers_listed() const;
  // The model's layer index of layer `layer` (0-based inside the chunk) of `chunk` on
  // `stage`: the layers of the model chunks before it come first.
  int global_layer(int stage, int chunk, int layer) const;

  // --- Partial activation checkpointing (parallel.checkpointed_layers).
  // Layers of the stage that are checkpointed and recomputed: 0 without checkpointing,
  // else min(checkpointed_layers, layers_on_stage), or all of them when it is -1.
  int checkpointed_layers_on_stage(int stage) const;
  // Of those, the ones in `chunk` (the stage's first layers in chunk order: chunk 0's
  // layers first): they are the chunk's first layers.
  int checkpointed_layers_in_chunk(int stage, int chunk) const;
  // Checkpointed layers over all stages / model.layers (0 without checkpointing).
  double checkpointed_fraction() const;

  // --- Mixture of experts: the stage's layers, its checkpointed layers, and `count`
  // layers of a chunk from its layer `first`, by kind (ModelSpec::is_moe_layer).
  LayerMix stage_mix(int stage) const;
  LayerMix checkpointed_mix(int stage) const;
  LayerMix chunk_mix(int stage, int chunk, int first, int count) const;
  // The experts' tensor degree: parallel.expert_tensor_parallel_degree, or the tensor
  // degree when it is 0.
  int expert_tensor_degree() const;
  // tensor x data_context / (expert_tensor x expert_parallel): the group over which the
  // experts' gradients are reduced (data_context / expert_parallel when the experts take
  // the tensor degree).
  int expert_data_parallel_degree() const;
  // optimizer_shard_fraction for the experts' parameters (their optimizer slice under
  // shard_optimizer_state is 1 / expert_data_parallel_degree).
  double expert_optimizer_shard_fraction() const;

  // --- LM head placement (parallel.lm_head_stage).
  bool lm_head_on_first_stage() const { return parallel.lm_head_stage == LmHeadStage::first; }
  // The pipeline stage that runs the LM head and the loss: the last, or the first with
  // the head placed there or in a V (whose last model chunk is stage 0's).
  int lm_head_stage() const {
    return lm_head_on_first_stage() || v_shaped(parallel.pipeline) ? 0 : parallel.pipeline_parallel_degree - 1;
  }
  // A tied embedding has two copies (the first stage's and the head stage's), whose
  // gradients the embedding group sums: when the head's stage is not the first. Multi-
  // token prediction shares the embedding with the MTP layers on the head's stage, which
  // keeps a copy likewise (Megatron-core: the embedding on the last stage and its gradient
  // all-reduced with the first's), tied or not.
  bool tied_embedding_copies() const {
    return (model.tied_embeddings || model.has_mtp()) && lm_head_stage() != 0;
  }
};

// Checks every cross-field rule (degrees multiply to the GPU count, TP fits in a node,
// the batch divides into micro-batches, ...). Returns the empty string when the job is
// consistent, else "key: reason" for the first violation.
struct JobViolation {
  std::string key;
  std::string reason;
  explicit operator bool() const { return !reason.empty(); }
};
JobViolation check_job(const Job& job);

}  // namespace partune
