#pragma once
// The per-rank program: the ordered instructions one rank runs for one training step.
// It is the contract between sim/ (which executes it on a simulated platform) and
// backend/ (which executes it with LibTorch): both run the same program and name their
// timeline events after the instructions (to_string(OpKind)), so predictions and
// measurements compare event by event. See docs/architecture.md.
//
// Execution rules:
//  - Instructions run in order on one rank. Compute (forward, recompute, backward,
//    backward_weight, optimizer_step) occupies the rank's device for `seconds`.
//  - Under a schedule that splits backward (schedule.hpp's splits_backward: zb-h1), a
//    `backward` computes the input gradients only (B: what goes to the previous stage)
//    and a later `backward_weight` of the same (micro-batch, chunk, layer) the weight
//    gradients (W); the gradient buckets follow the W's. Otherwise backward does both.
//  - A communication with async = false blocks until it completes. With async = true it
//    starts and the program goes on; a later `wait` (wait_for = its index) blocks until
//    it completes. Every async instruction is waited for before the program ends.
//  - send_* / recv_* pair up between `peer` ranks in program order, per direction and kind.
//  - A recv_* with posted_early is posted before the compute instruction ahead of it (an
//    executor posts the flagged receives up to the next compute before running one).
//  - A collective (all_reduce, all_gather, reduce_scatter) runs over `group`; every member
//    issues the same collectives in the same order, and it starts when all have arrived.
//    `bytes` follows collective.hpp (all_reduce / reduce_scatter: input S; all_gather:
//    output S); `count` collectives of that size are folded into one instruction and pay
//    latency `count` times.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/job.hpp"
#include "partune/costmodel/placement.hpp"

namespace partune {

enum class OpKind : std::uint8_t {
  forward,          // a chunk's (or a layer's) forward kernels for one micro-batch
  recompute,        // forward kernels repeated before backward under checkpointing
  backward,
  backward_weight,  // a split backward's weight gradients (W), after its backward (B)
  send_activation,  // to the next stage
  recv_activation,  // from the previous stage
  send_gradient,    // to the previous stage
  recv_gradient,    // from the next stage
  all_reduce,
  all_gather,
  reduce_scatter,
  all_to_all,       // a mixture of experts' token dispatch or combine (expert group)
  optimizer_step,
  offload,          // device -> host copy of checkpointed activations
  reload,           // host -> device, ahead of backward
  offload_gradients,  // offload_optimizer: this rank's gradient shard, device -> host, before the step
  reload_parameters,  // host -> device: the updated 16-bit shard after a host step, or (offload_parameters)
                      // a layer's shard before its all-gather
  wait,
};
const char* to_string(OpKind k);
bool is_compute(OpKind k);
bool is_collective(OpKind k);
// The collective a collective instruction runs (collective.hpp's kinds, whose costs and
// traffic it is priced with and the backend books it under); none for other kinds.
std::optional<CollectiveKind> collective_of(OpKind k);

// The communicator a collective runs on.
enum class CommGroup : std::uint8_t {
  none,
  tensor,    // tensor-parallel group: the collectives of the compute instruction before
             // each; one all_reduce without a micro-batch before the optimizer: the
             // sequence-parallel sum of the replicated parameters' gradients
  data,      // data-parallel group: gradient all-reduce (or RS + AG with optimizer sharding)
  sharded,   // sharded-data-parallel group: parameter all-gather, gradient reduce-scatter
  replica,   // same shard across sharded groups: gradient all-reduce of the shard
  embedding, // first and last pipeline stage (same data and tensor coordinates): the two
             // copies of a tied embedding sum their gradients (Megatron's embedding group)
  expert,    // expert group (expert_grid.hpp: with the tensor degree's experts,
             // expert_parallel_degree consecutive data-parallel ranks): the all-to-alls of
             // each layer with experts
  expert_data,  // the same expert rank in every expert group (expert_grid.hpp): the
                // experts' gradient all-reduce (or RS + AG with optimizer sharding)
  context,      // context group (context_parallel_degree consecutive members of the data
                // axis): the key/value exchanges or all-to-alls around each attention core;
                // with a2a+p2p the ring only: the members whose place in their a2a
                // sub-group is this rank's
  context_a2a,  // a2a+p2p: the context_a2a_degree consecutive members of the context group
                // exchanging heads
  expert_tensor,  // the experts' tensor group (expert_grid.hpp; MoE parallel folding): the
                  // gathers and reduce-scatters of the dispatched tokens around the experts
  expert_block,   // the expert-tensor x expert block (expert_grid.hpp): the allgather
                  // dispatcher's token gather and result reduce-scatter
};
// Communicator kinds, for arrays indexed by CommGroup.
inline constexpr int kCommGroupCount = static_cast<int>(CommGroup::expert_block) + 1;
const char* to_string(CommGroup g);
// The members of `rank`'s communicator of this kind, in rank order ({rank} alone when
// the job has no such group for it). The simulator and the backend build their
// communicators from this.
std::vector<int> comm_group_members(const Job& job, int rank, CommGroup group);
// The algorithm a collective of `kind` (all_reduce, all_gather, reduce_scatter) runs with
// on a communicator of this kind: the data and replica groups use
// data_parallel_collective, the sharded group sharded_collective (SMDDP's all-to-all is
// an AllGather only: its reduce-scatter stays a ring), the tensor and embedding groups a
// ring. The estimator and the simulator both ask this.
CollectiveAlgorithm collective_algorithm(const ParallelConfig& pc, CommGroup group, OpKind kind);
// The phases of collective instruction `kind` (collective_of(kind) set) over `group` of
// `span`, as the job runs it: collective_algorithm's, the expert group's all-to-all as its
// dispatcher sends it (expert_exchange.hpp). The simulator's traffic and own-links times.
CollectivePhases program_collective_phases(const Job& job, CommGroup group, OpKind kind, double bytes,
                                           const GroupSpan& span);

struct Instruction {
  OpKind kind = OpKind::forward;
  CommGroup group = CommGroup::none;
  std::int32_t microbatch = -1;  // -1 when not tied to one micro-batch
  std::int16_t chunk = 0;        // model chunk (virtual stage) on this rank
  std::int16_t layer = -1;       // first layer of the stage's chunk covered; -1 = whole chunk
  std::int16_t layers = 0;       // number of transformer layers covered
  std::int32_t peer = -1;        // send/recv: the other rank
  std::int32_t count = 1;        // collectives folded into this instruction
  double bytes = 0;              // communication or copy payload
  double seconds = 0;            // compute time predicted by the cost model
  bool async = false;
  // recv_activation / recv_gradient under overlap_p2p_comm: posted before the compute
  // instruction ahead of it (the executors look ahead), so the bytes move while it runs.
  bool posted_early = false;
  std::int32_t wait_for = -1;    // kind == wait: index of the awaited instruction
};

struct RankProgram {
  int rank = 0;
  RankCoords coords;
  std::vector<Instruction> ops;
};

// One executed instruction on a timeline, the same type for the simulator's predictions
// and the backend's measurements so they compare event by event; its name is
// to_string(kind).
struct TraceEvent {
  int rank = 0;
  int stream = 0;           // 0 compute, 1 pipeline/copies, 2+ one per communicator
  OpKind kind = OpKind::forward;
  CommGroup group = CommGroup::none;
  int microbatch = -1, chunk = 0, layer = -1;
  // Collectives the event stands for: the instruction's count in the simulator; in the
  // backend, the tensor-parallel calls its layers actually made (f, g, sequence-parallel
  // gathers and scatters, the loss's reductions).
  int count = 1;
  double start = 0, end = 0;  // seconds from the step's start (the backend: since the run started)
};

}  // namespace partune
