#pragma once
// The layer plan: the work of one transformer layer (and of the embedding and the LM
// head) for a model and a parallel configuration, written once as an ordered list of
// typed ops on one tensor-parallel rank. Everything else is a sum or a walk over it:
//   - FLOPs (flops.hpp): the GEMMs and the attention core of the plan at tensor degree 1;
//   - activation memory (memory.hpp): what each op keeps for backward (Korthikanti et al.
//     2022, Table 2: sbh(10 + 24/t + 5as/(ht)), and sbh(34/t + 5as/(ht)) with sequence
//     parallelism);
//   - op times (op_cost.hpp): each GEMM, the attention core, the memory-bound kernels;
//   - tensor-parallel communication: each region edge states its conjugate pair
//     (Megatron-core's f / g, or sequence parallelism's all-gather / reduce-scatter), so
//     the estimator, the per-rank programs and the LibTorch layers read the same list.
// Calculon's llm.py (a block as a list of typed layers) and Megatron-core's
// tensor_parallel/layers.py (each layer states its f/g conjugates) are the models.
#include <array>
#include <cstdint>
#include <vector>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/job.hpp"

namespace partune {

// Megatron's conjugate operators at the edges of a tensor-parallel region. Each names
// what it runs in the forward pass and in the backward pass over the tensor group.
enum class Conjugate : std::uint8_t {
  f,            // identity forward, all-reduce backward (before a column-parallel GEMM)
  g,            // all-reduce forward, identity backward (after a row-parallel GEMM; the
                // vocabulary-parallel embedding's output)
  sp_gather,    // sequence parallelism's g: all-gather forward, reduce-scatter backward;
                // the GEMM after it keeps the sequence shard and all-gathers it again in
                // backward for its weight gradient (overlapped with the input gradient)
  sp_scatter,   // sequence parallelism's g-bar: reduce-scatter forward, all-gather backward
  gather,       // all-gather forward over the last dimension, split backward (no
                // collective): Megatron-core's gather_from_tensor_model_parallel_region,
                // after the multi-token-prediction projection
  split,        // split forward (no collective), all-gather backward: Megatron-core's
                // scatter_to_sequence_parallel_region (sequence parallelism's shard taken)
  loss_reduce,  // vocabulary-parallel cross-entropy: three all-reduces forward (the
                // maximum, the sum of exponentials, the target logit), none backward
};
const char* to_string(Conjugate c);

enum class PlanOpKind : std::uint8_t {
  gemm,            // Y[m x n] = X[m x k] W[k x n]; backward: dX (m x k x n), dW (k x n x m)
  attention_core,  // Q K^T, softmax, dropout, scores x V (standard or flash)
  memory_bound,    // norms, activation, bias-dropout-residual, embedding lookup, loss
  tensor_comm,     // a conjugate at a tensor-parallel region edge
  expert_comm,     // an all-to-all over the expert group (MoE dispatch, combine): one
                   // forward and one backward; or the experts' tensor group's all-gather
                   // (expert_gather) and reduce-scatter (expert_scatter), swapped backward
  context_comm,    // context parallelism's exchange around the attention core, by
                   // ContextComm (context_collectives says what each runs per pass)
};

// Where the plan's ops sit: a transformer layer, the embedding, or the LM head.
enum class PlanPart : std::uint8_t { layer, embedding, head };

// What an op is in its plan, in the order the plans list them. Readers reach an op by
// its role (LayerPlan::op), never by a name string.
enum class PlanOpRole : std::uint8_t {
  // A transformer layer (dense or with experts).
  input_norm,
  attention_in,  // tensor_comm: entering the attention region
  qkv,
  q_down,       // multi-head latent attention (ModelSpec::is_mla) in place of qkv:
  kv_down,      //   the down projections to the latents (whole on every tensor rank),
  latent_norm,  //   their RMSNorms,
  q_up,         //   and the up projections by heads
  kv_up,
  qk_norm,  // QK-norm only (ModelSpec::qk_norm)
  rotary,   // rotary positions only
  context_in,  // context_comm (context parallelism): keys and values exchanged (p2p,
               // allgather), or Q, K and V from the sequence split to the head split (a2a;
               // a2a+p2p: over the a2a sub-group)
  context_ring,  // context_comm, a2a+p2p only: keys and values around the ring of sub-groups
  attention,
  context_out,  // context_comm (a2a only): the context back to the sequence split
  projection,
  attention_out,  // tensor_comm: leaving the attention region
  attention_dropout_residual,
  mlp_norm,
  mlp_in,  // tensor_comm: entering the MLP region
  fc1,     // dense MLP
  activation,
  fc2,
  router,  // a layer with experts' MLP
  routing,
  dispatch,  // expert_comm: the all-to-all over the expert group
  token_gather,  // expert_comm (allgather dispatcher): every rank's tokens gathered over the
                 // expert-tensor x expert block
  expert_gather,  // expert_comm: the experts' tensor group gathers the dispatched tokens
  expert_fc1,
  expert_activation,
  expert_fc2,
  expert_scatter,  // expert_comm: ... and reduce-scatters the experts' results
  combine,  // expert_comm: the all-to-all back
  token_scatter,  // expert_comm (allgather dispatcher): the results reduce-scattered back
  unpermute,
  shared_fc1,  // shared experts only (ModelSpec::shared_expert_ffn_hidden)
  shared_activation,
  shared_fc2,
  mlp_out,  // tensor_comm: leaving the MLP region
  mlp_dropout_residual,
  // The embedding.
  embedding_lookup,
  embedding_out,  // tensor_comm: the vocabulary-parallel lookup's sum
  // The LM head.
  head_in,  // tensor_comm: entering the head's region
  logits,
  loss,
  loss_reduce,  // tensor_comm: vocabulary-parallel cross-entropy's reductions
  // A multi-token-prediction depth, in the head plan after the head (ModelSpec::mtp_layers):
  mtp_embedding,      // the shifted tokens' lookup in the shared table (no parameters of its own)
  mtp_embedding_out,  // tensor_comm: the vocabulary-parallel lookup's sum
  mtp_norms,          // the RMSNorms of the embedding and of the hidden state, side by side
  mtp_projection_in,  // tensor_comm: entering the projection's region (its 2h-wide input)
  mtp_projection,     // 2h -> h, column-parallel
  mtp_gather,         // tensor_comm (gather): the projection's output columns gathered
  mtp_split,          // tensor_comm (split), sequence parallelism: the sequence shard taken
  // ... then the ops of one transformer layer, and the head's four again (head_in, logits
  // holding the depth's final norm, loss, loss_reduce) over the shared output projection.
};
const char* to_string(PlanOpRole r);

// The memory-bound kernels' rate classes (GpuProfile's rates; the profiled step's kernel
// categories in brackets): element-wise kernels over contiguous tensors at the HBM
// efficiency [element-wise]; LibTorch's non-vectorised element-wise kernel, where an
// operand is broadcast or strided (a norm's per-row factor, rotary's tables, a bias, a
// slice) [element-wise]; norms, softmax and reductions [reductions and norms]; copies:
// layout changes and number-format conversions [copies]; copies into or out of a strided
// view, or converting the format, through LibTorch's non-vectorised copy kernel, at the
// strided rate [copies]; a transposed view made contiguous (reading across rows: the fp8
// operands' transposes) [copies].
enum class KernelClass : std::uint8_t { elementwise, strided, norm, copy, strided_copy, transpose };
inline constexpr int kKernelClasses = 6;
const char* to_string(KernelClass c);

// The memory-bound kernels of one op in one pass, by class: HBM bytes and launches.
struct KernelWork {
  std::array<double, kKernelClasses> bytes{};
  std::array<int, kKernelClasses> kernels{};
  void add(KernelClass c, double b, int k) {
    bytes[static_cast<int>(c)] += b;
    kernels[static_cast<int>(c)] += k;
  }
  KernelWork& operator+=(const KernelWork& o) {
    for (int i = 0; i < kKernelClasses; ++i) {
      bytes[i] += o.bytes[i];
      kernels[i] += o.kernels[i];
    }
    return *this;
  }
  double total_bytes() const {
    double sum = 0;
    for (double b : bytes) sum += b;
    return sum;
  }
  int total_kernels() const {
    int sum = 0;
    for (int k : kernels) sum += k;
    return sum;
  }
};

struct PlanOp {
  PlanOpRole role = PlanOpRole::input_norm;
  PlanOpKind kind = PlanOpKind::memory_bound;
  // gemm: per-rank shape of the forward product, `batch` of them (a rank's experts: one
  // product each). attention_core: m = score elements (b x heads/t x s x s), k = head_dim.
  double m = 0, n = 0, k = 0;
  double batch = 1;
  // Forward FLOPs on this rank (gemm: 2mnk; attention core: QK^T and AV, causal mask not
  // skipped, a sliding window's pairs only).
  double flops = 0;
  // attention_core: the share of the s x s pairs `flops` counts (ModelSpec::
  // attention_span_fraction; 1 without a window). FlashAttention skips the rest; the
  // standard core computes every score and masks them.
  double score_fraction = 1;
  // attention_core: the keys one kernel call attends over (s, or a context rank's block of
  // s / cp under p2p and all-gather context parallelism), and the flash kernel the stack
  // runs (PlanConfig::attention_impl): the flash rate's curve (hardware.hpp's FlashCurve).
  double seq = 0;
  std::optional<AttentionKernel> attention_kernel;
  // attention_core, standard: its passes over the scores (scale, mask, softmax) are in
  // forward_work / backward_work, as an eager stack runs them (kernel_fusion eager), rather
  // than the profile's score_bytes_fwd / _bwd.
  bool score_passes_in_work = false;
  // gemm in an 8- or 4-bit format: its operands' scaling, casts and transposes are in
  // forward_work / backward_work: as an eager stack runs them (LibTorch's operators), or as
  // Transformer Engine's fused cast-transposes under the job's recipe (fp8_casts.cpp).
  bool casts_in_work = false;
  // The memory-bound kernels the op runs forward and backward: a memory_bound op's own;
  // beside a GEMM or the attention core, what the stack runs apart from them (with
  // kernel_fusion eager: a bias add and its gradient's sum, the core's layout copies).
  KernelWork forward_work, backward_work;
  // Bytes kept for backward per micro-batch on this rank: `stored` always, `recomputable`
  // only when the op is not recomputed (the attention core's scores; 0 with flash).
  double stored = 0, recomputable = 0;
  // Selective recomputation repeats this op in backward rather than keep its
  // `recomputable` bytes (the attention core, Korthikanti et al. 2022 §4.2). Full
  // recomputation repeats every op that computes (`recomputed` below).
  bool selective_recompute = false;
  // Selective checkpointing by module (PlanConfig::recompute_modules, apply_module_
  // checkpointing): the bytes of `stored` the op no longer keeps because the module that
  // wrote them recomputes them (an up projection's outputs the attention core held, a
  // norm's output the next GEMM held, a checkpointed module's insides).
  double selective_dropped = 0;
  // Checkpointing::op (torchtitan's op-level rule, apply_op_checkpointing): the share of the
  // op's forward its backward repeats, and the bytes it keeps (the outputs of the matmuls
  // and the attention kernel the rule saves). A fused GEMM (QKV, SwiGLU's gate and up) is
  // the separate matmuls torchtitan runs: the rule saves some of them and repeats the rest.
  double op_recompute = 1;
  double op_saved = 0;
  // Checkpointing::dots: the same for JAX's checkpoint_dots (every weight matmul kept).
  double dots_recompute = 1;
  double dots_saved = 0;
  // tensor_comm: the conjugate and its payload (collective.hpp's S: the full activation).
  // context_comm: the exchange and its payload (S of the collectives it runs).
  Conjugate conjugate = Conjugate::f;
  // tensor_comm, sequence-parallel: its collectives run beside the GEMM the edge feeds or
  // follows (PlanConfig::tp_comm_overlap: a dense layer's four edges and the head's entry).
  // expert_comm: beside the layer's kernels (PlanConfig::moe_a2a_overlap).
  bool comm_beside_gemm = false;
  ContextComm context = ContextComm::p2p;
  bool context_sub_group = false;  // context_comm over the a2a sub-group (a2a+p2p)
  double comm_bytes = 0;
  int comm_count = 1;  // collectives of that size (loss_reduce: 3)
  // Parameter elements of the op replicated over the tensor group whose gradient on a
  // rank covers only its part of the work, summed over the tensor group once a step
  // before the optimizer: with sequence parallelism its sequence shard (Megatron's
  // `sequence_parallel` parameters: the norms' weights and biases, the row-parallel
  // GEMMs' biases); QK-norm's scales, its heads (at any tensor degree above 1).
  double shard_gradient_params = 0;
  // Parameter elements the op holds on this rank (weights and biases; a norm's scale and
  // shift): what sharded data parallelism gathers and reduce-scatters per op (sharding.hpp),
  // and the one count of parameters (parameter_count.hpp). Megatron-LM's split over the
  // tensor group: a column-parallel GEMM's weight and bias, a row-parallel GEMM's weight
  // and the vocabulary table's rows are split; the norms' scale and shift, a row-parallel
  // GEMM's bias (added after the reduction), the router and the learned position table
  // are whole on every tensor rank.
  double params = 0;
  int parameter_tensors = 0;  // the tensors `params` come in (weight, bias; scale, shift)
  // The parameters are experts': split over the expert group and reduced over the
  // expert-data-parallel group rather than the data-parallel one.
  bool expert = false;
};

struct LayerPlan {
  PlanPart part = PlanPart::layer;
  std::vector<PlanOp> ops;
  // What the layer keeps when fully checkpointed (its input; the sequence shard with
  // sequence parallelism).
  double input_bytes = 0;
  // One micro-batch's hidden states on this rank, b s/cp x hidden in the training
  // precision: what a layer passes on (a pipeline hop carries 1/t of it) and the tensor
  // collectives' S.
  double activation_bytes = 0;
  // The host dispatches every kernel (no CUDA graphs): op_cost.hpp's dispatch floor applies.
  bool host_dispatch = true;

  // Sums over the ops.
  double forward_flops() const;
  double gemm_flops() const;
  double attention_flops() const;
  double stored_bytes(Checkpointing policy) const;  // what one micro-batch keeps
  // What a split backward's W step still needs after B, one micro-batch: each GEMM's
  // input X and output gradient dY (dW = X^T dY), at `element_bytes` an element.
  double weight_gradient_bytes(double element_bytes) const;
  double shard_gradient_params() const;              // 0 without sequence parallelism or QK-norm
  double params() const;                             // parameter elements on this rank
  double expert_params() const;                      // of which experts' (PlanOp::expert)
  // Parameter tensors on this rank (a GEMM's weight and bias, a norm's scale and shift, a
  // table): what an optimizer that runs a kernel per tensor launches.
  int parameter_tensors() const;
  // The ops `policy` repeats in backward (`recomputed`): their forward FLOPs, and the
  // bytes recomputing them materialises beside what the layer kept (full: every op's
  // stored bytes; selective: the attention scores).
  double recomputed_flops(Checkpointing policy) const;
  double recomputed_bytes(Checkpointing policy) const;
  // The op of `role`: nullptr when the plan has none (find), a std::logic_error naming
  // the role and the part when it has none (op: for the ops every such plan holds).
  const PlanOp* find(PlanOpRole role) const;
  const PlanOp& op(PlanOpRole role) const;
};

// Whether backward repeats `op` under `policy`: nothing without checkpointing, the ops
// marked selective_recompute under selective, every op that computes (GEMMs, the
// attention core, the memory-bound kernels) under full. The one recompute rule: FLOPs
// (recomputed_flops), memory (recomputed_bytes, stored_bytes) and op times
// (op_cost.hpp's LayerTime::recompute) all filter the plan's ops through it. The tensor
// collectives repeated under full are tensor_collectives' PlanPass::recompute.
bool recomputed(const PlanOp& op, Checkpointing policy);
// The share of `op`'s forward that backward repeats under `policy`: 0 or 1, but for a
// fused GEMM under Checkpointing::op (PlanOp::op_recompute).
double recompute_share(const PlanOp& op, Checkpointing policy);

// Marks a layer plan's ops for Checkpointing::op, as torchtitan's policy
// (_get_custom_policy in its activation checkpointing) runs over its modules: the attention
// kernel's output and its log-sum-exp are kept; of the aten.mm calls in forward order (wq,
// wk, wv, wo, w1, w3, w2 for a LLaMA layer) every other one is repeated, the first, third,
// ... kept; everything else (norms, rotary, activations, residuals, grouped expert GEMMs)
// is repeated. And for Checkpointing::dots (JAX's checkpoint_dots_with_no_batch_dims with
// the attention output saved, MaxText's minimal_flash): every matmul but the batched expert
// ones kept, the element-wise ops repeated. `eb`: bytes an activation element.
void apply_op_checkpointing(LayerPlan& plan, const ModelSpec& m, int tensor_degree, double eb);

// Marks a layer plan's ops for Checkpointing::selective by Megatron's modules (job.hpp's
// RecomputeModule): which ops backward repeats (selective_recompute) and which bytes the
// ops no longer keep (selective_dropped). The default set (core_attn) leaves the plan as
// written: the attention core recomputed, its scores dropped.
void apply_module_checkpointing(LayerPlan& plan, RecomputeModules modules);

// What a plan depends on besides the model.
struct PlanConfig {
  double sequences = 1;  // micro-batch size b
  int tensor_degree = 1;
  int expert_degree = 1;  // expert_parallel_degree (MoE layers)
  int expert_tensor_degree = 0;  // Job::expert_tensor_degree (MoE layers); 0: tensor_degree
  MoeDispatcher moe_dispatcher = MoeDispatcher::alltoall;  // parallel.moe_token_dispatcher
  bool moe_a2a_overlap = false;  // parallel.moe_a2a_overlap: the experts' exchanges beside kernels
  int context_degree = 1;  // context_parallel_degree: each rank holds s / cp tokens
  ContextComm context_comm = ContextComm::p2p;
  int context_a2a_degree = 0;  // a2a+p2p: the a2a sub-group's size
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;  // the sequence-parallel collectives beside their GEMMs
  bool flash_attention = false;
  std::optional<AttentionKernel> attention_impl;  // the flash kernel (job.hpp's); unset: the GPU's own
  Precision precision = Precision::fp16;
  LossPrecision loss_precision = LossPrecision::fp32;
  KernelFusion kernel_fusion = KernelFusion::fused;
  Fp8Recipe fp8_recipe = Fp8Recipe::delayed;  // a fused stack's fp8 scaling (job.hpp)
  bool cuda_graphs = false;  // the host's dispatch leaves no gap (op_cost.hpp)
  // What selective checkpointing recomputes (job.hpp's RecomputeModule set).
  RecomputeModules recompute_modules = kDefaultRecomputeModules;
  int experts_tensor_degree() const { return expert_tensor_degree > 0 ? expert_tensor_degree : tensor_degree; }
};
PlanConfig plan_config(const Job& job);  // micro-batch size and the job's parallel knobs
// A strict order over every field of PlanConfig, and equality of every field (the key of
// a model's plans by configuration, plan_costs.hpp).
bool plan_config_less(const PlanConfig& a, const PlanConfig& b);
bool same_plan_config(const PlanConfig& a, const PlanConfig& b);

// A dense layer; moe_layer_plan: a layer with experts (ModelSpec::experts), whose MLP is
// the router, the dispatch all-to-all, the rank's experts (tensor-parallel like the dense
// MLP) and the combine all-to-all; layer_plan: the one of either kind.
LayerPlan transformer_layer_plan(const ModelSpec& m, const PlanConfig& c);
LayerPlan moe_layer_plan(const ModelSpec& m, const PlanConfig& c);
LayerPlan layer_plan(const ModelSpec& m, const PlanConfig& c, bool moe);
LayerPlan embedding_plan(const ModelSpec& m, const PlanConfig& c);
// The LM head; with multi-token prediction (ModelSpec::mtp_layers) followed by each
// depth's ops (PlanOpRole's mtp_*, a layer's, the head's again): the MTP layers sit with
// the loss, so whatever reads the head plan counts them.
LayerPlan head_plan(const ModelSpec& m, const PlanConfig& c);

// --- Collectives of a plan, in the order they run: the tensor group's and, in a layer
// with experts, the expert group's all-to-alls.
enum class PlanPass : std::uint8_t { forward, backward, recompute };
enum class PlanGroup : std::uint8_t { tensor, expert, context, context_a2a, expert_tensor, expert_block };
struct TensorCollective {
  CollectiveKind kind = CollectiveKind::all_reduce;
  PlanGroup group = PlanGroup::tensor;
  double bytes = 0;    // S, collective.hpp's convention
  int count = 1;
  // Runs beside the kernels (the sequence-parallel re-gather of a GEMM's input for its
  // weight gradient, in backward; context parallelism's p2p ring, beside the attention
  // core's blocks) rather than between dependent kernels.
  bool overlapped = false;
};
// The collectives `pass` runs over the tensor group (none when tensor_degree is 1), the
// expert group (none when expert_degree is 1) and the context group (none when
// context_degree is 1). Context parallelism's, per exchange (S: context_comm's bytes):
//   p2p:       forward an all-gather of K and V beside the core (the ring's cp - 1 steps
//              move what a ring all-gather moves); backward K and V again and the
//              reduce-scatter of their gradients, both beside the core's backward;
//   allgather: the same collectives, blocking;
//   a2a:       one all-to-all forward and one backward at each of context_in and
//              context_out;
//   a2a+p2p:   the a2a's over the a2a sub-group (context_a2a), then p2p's around the
//              ring of sub-groups (context_ring) on the keys and values of the rank's
//              heads / a over its sub-group's tokens.
// recompute: the forward's collectives again under full checkpointing, none otherwise
// (selective recomputation repeats only the attention core).
std::vector<TensorCollective> tensor_collectives(const LayerPlan& plan, PlanPass pass,
                                                 Checkpointing policy = Checkpointing::none);
// Adds `times` x `c` to `into`, folded into an equal (kind, group, bytes, overlapped) collective
// already there: the one folding rule of the stage costs and the programs.
void add_folded(std::vector<TensorCollective>& into, TensorCollective c, int times = 1);

}  // namespace partune
