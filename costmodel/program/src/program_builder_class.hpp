#pragma once
// The builder of one rank's program (program_builder.hpp's build_program), as one class
// whose parts live in their own files: program_builder.cpp (set-up, the schedule's walk, sends,
// forwards and the head), program_collectives.cpp (the layer plan's tensor collectives
// and sharded data parallelism's gathers and reduce-scatters), program_backward.cpp
// (backward, recompute, activation offload and reload) and program_step_end.cpp (the
// gradient buckets, the data-parallel reductions and the optimizer step).
#include <algorithm>
#include <initializer_list>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "partune/costmodel/program.hpp"
#include "partune/costmodel/schedule.hpp"
#include "partune/costmodel/program_builder.hpp"
#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/activation_memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/sharding.hpp"
#include "partune/costmodel/job_costs.hpp"
#include "partune/costmodel/stage_cost.hpp"

#include "head_placement.hpp"

namespace partune::detail {

// Builds one rank's program. Reads the job's costs (built once for every rank) so each
// instruction is a lookup.
class ProgramBuilder {
 public:
  ProgramBuilder(const JobCosts& costs, int rank, const ProgramOptions& options);

  RankProgram build();

 private:
  // Global position of this rank's chunk in the model (job.hpp's model_chunk).
  int model_stage(int chunk) const { return model_chunk(pc_, program_.coords.pipeline, chunk); }
  bool first_model_stage(int chunk) const { return model_stage(chunk) == 0; }
  bool last_model_stage(int chunk) const { return model_stage(chunk) == p_ * v_ - 1; }
  // The chunk's forward and backward include the LM head (lm_head_stage: last).
  bool runs_head(int chunk) const { return !head_first_ && last_model_stage(chunk); }
  // Layers of the chunk that are checkpointed (its first ones) and recomputed.
  int checkpointed(int chunk) const { return job_.checkpointed_layers_in_chunk(stage_, chunk); }
  // Transformer layers of the chunk (0: the embedding or the head alone).
  int layers(int chunk) const { return job_.layers_in_chunk(stage_, chunk); }

  // The schedule's steps for this stage; with the head on stage 0, stage 0's also hold
  // the head steps (place_head_steps).
  std::vector<Step> stage_steps() const;
  // What place_head_steps needs: every stage's slot for one micro-batch (stage_cost.hpp),
  // the head's time and one pipeline hop.
  StageTimes stage_times() const;

  // The rank of the model chunk before (direction -1) or after (+1) this rank's `chunk`;
  // local: it is this rank (a V's turn on the last stage: no transfer).
  int neighbour(int chunk, int direction) const;
  bool local(int chunk, int direction) const { return neighbour(chunk, direction) == program_.rank; }

  int push(Instruction in);
  void wait(int index);
  // Sends and copies of one kind go one at a time: the previous one is awaited before the
  // next starts (Megatron waits on each batched send/receive; a copy engine is FIFO).
  // This keeps at most one of each outstanding per rank.
  int start_after_previous(Instruction in);

  int start_async(Instruction in);

  Instruction compute(OpKind kind, int mb, int chunk, int layer, int layers, double seconds) const;
  Instruction collective(OpKind kind, CommGroup group, double bytes, int count, int mb, int chunk,
                         int layer) const;
  // --- tensor-parallel collectives, from the layer plan (layer_plan.hpp).
  // The collectives of `parts` (plan pass lists, each `times` over), equal ones folded.
  struct Part {
    const std::vector<TensorCollective>* list;
    int times;
  };
  static std::vector<TensorCollective> gather(std::initializer_list<Part> parts, bool overlapped);
  static OpKind op_kind(CollectiveKind k) {
    return k == CollectiveKind::all_gather       ? OpKind::all_gather
           : k == CollectiveKind::reduce_scatter ? OpKind::reduce_scatter
           : k == CollectiveKind::all_to_all     ? OpKind::all_to_all
                                                 : OpKind::all_reduce;
  }
  static CommGroup comm_group(const TensorCollective& c) {
    return c.group == PlanGroup::expert          ? CommGroup::expert
           : c.group == PlanGroup::expert_tensor ? CommGroup::expert_tensor
           : c.group == PlanGroup::expert_block  ? CommGroup::expert_block
           : c.group == PlanGroup::context     ? CommGroup::context
           : c.group == PlanGroup::context_a2a ? CommGroup::context_a2a
                                               : CommGroup::tensor;
  }
  // Is model layer `l` of `chunk` one with experts; the plan lists of each kind.
  bool moe(int chunk, int l) const { return job_.model.is_moe_layer(job_.global_layer(stage_, chunk, l)); }
  // The blocking collectives after a compute instruction.
  void tensor_collectives_after(std::initializer_list<Part> parts, int mb, int chunk, int layer);
  // The overlapped ones (sequence-parallel re-gathers) start before the compute they run
  // beside; the returned indices are awaited after it (wait_all).
  std::vector<int> tensor_collectives_beside(std::initializer_list<Part> parts, int mb, int chunk, int layer);
  void wait_all(const std::vector<int>& indices);
  // A compute instruction with the collectives of `parts`: the overlapped ones started
  // before it and awaited after it, then the blocking ones.
  void compute_with_collectives(const Instruction& work, std::initializer_list<Part> parts);
  Instruction p2p(OpKind kind, int peer, int mb, int chunk) const;

  // --- sharded data parallel (sharding.hpp): each layer's gather units are gathered
  // before use; the next layer's gather is started (prefetched) before this layer's
  // kernels, or after them / not at all in backward as the flavour's prefetch says.
  void gather_layer(int mb, int chunk, int layer, int layers_in_chunk, bool descending);
  void prefetch(int mb, int chunk, int next, int layers_in_chunk, bool descending);
  // With offload_parameters the layer's shard comes from the host first (its gather
  // starts once it is on the device).
  int start_gather(int mb, int chunk, int layer);
  // A blocking device<->host copy of states (offload_optimizer, offload_parameters).
  static Instruction copy_of(OpKind kind, double bytes);
  // The embedding and head weights are sharded too: one more unit with the layer beside
  // them. A call's bytes are the mean of the instruction's units (count calls).
  Instruction sharded_gather(int mb, int chunk, int layer) const;
  // The layer's gradients (all of its parameters, persistent ones too) in the flavour's
  // reduce-scatter calls, the embedding's or head's in one more.
  Instruction sharded_reduce(int mb, int chunk, int layer) const;
  // FSDP2's copies on the compute stream (sharding.hpp's gather_copies), in the seconds of
  // the layer's compute instruction after its gather (forward, backward) and before its
  // reduce-scatter (backward); 0 without them.
  double gather_copy_seconds(int chunk, int layer) const;
  double reduce_copy_seconds(int chunk, int layer) const;

  void forward(int mb, int chunk);

  // lm_head_stage: first, on stage 0: the LM head of one micro-batch, forward and
  // backward back to back, between the last stage's activation and its gradient. Every
  // instruction carries chunk = virtual_stages (the head's own chunk).
  void head(int mb);

  bool offloading() const;
  // A device<->host copy of what checkpointing keeps: one checkpointed layer's, or the
  // chunk's (-1: its checkpointed layers, the chunk's first ones).
  Instruction copy(OpKind kind, int mb, int chunk, int layer) const;
  // Per layer: reloads run activation_loading_horizon layers ahead of the backward, for
  // the checkpointed layers (the others never left the device).
  void reload_layers_from(int mb, int chunk, int layer);

  void backward(int mb, int chunk, bool sync_gradients, int backward_index);
  // A split backward's W (split_): the weight gradients of the chunk's layers (and head),
  // per layer or as one instruction; the last W of a chunk carries its gradient buckets.
  void backward_weight(int mb, int chunk, bool sync_gradients);
  // Kernel seconds of one layer's backward instruction, and of the head's part of it: all
  // of backward, or with a split backward its input gradients only.
  double backward_seconds(bool moe) const {
    return split_ ? layer_[moe].backward_input() : layer_[moe].backward();
  }
  double head_backward_seconds() const { return head_.logits_bwd - (split_ ? head_.logits_weight_bwd : 0.0); }
  // The gradient buckets of layer `l` once its gradients are complete (data, and
  // expert_data for experts).
  void layer_buckets(int chunk, int l);

  // One layer's backward: its weights gathered (sharded), its activations reloaded
  // (offload), its recompute if checkpointed (the chunk's first `ckpt` layers), the
  // kernels with the plan's tensor collectives around them, then its gradient bucket.
  void backward_layer(int mb, int chunk, int l, bool buckets);
  // A gradient bucket over `group` (data, or expert_data for experts): reduce-scattered
  // under optimizer-state sharding, else all-reduced; tagged (chunk, layer).
  Instruction gradient_bucket(CommGroup group, double bytes, int chunk, int layer) const {
    return collective(pc_.shard_optimizer_state ? OpKind::reduce_scatter : OpKind::all_reduce, group, bytes, 1, -1,
                      chunk, layer);
  }

  // A whole chunk's backward as one instruction (chunk granularity): the recompute of its
  // checkpointed layers first, as one instruction too.
  void backward_chunk(int mb, int chunk);

  // Embedding and head parameters a chunk holds besides its layers (a tied embedding is
  // kept on both pipeline ends when the head is on the last stage, as Megatron does; a
  // head on the first stage uses the embedding itself).
  double embedding_params(int chunk) const { return first_model_stage(chunk) ? rank_.embedding : 0.0; }
  double head_params(int chunk) const;
  // They travel with the gradient bucket of the layer next to them (bucket_extras):
  // how many, and their gradient's bytes.
  double extra_params(int chunk, int layer) const;
  double extra_gradient_bytes(int chunk, int layer) const { return extra_params(chunk, layer) * gb_; }
  // Of those, the MTP layers' experts (reduced over the expert-data group with expert
  // parallelism, as a layer's experts are).
  double extra_expert_bytes(int chunk, int layer) const;
  // A chunk without layers: its embedding's or head's gradient buckets.
  void extra_buckets(int chunk);

  // This rank holds one of the two copies of a tied embedding: pipeline > 1 with the head
  // on the last stage, and this is the first or the last stage.
  bool tied_copies() const;

  bool holds_head(int chunk) const { return head_first_ ? first_model_stage(chunk) : last_model_stage(chunk); }
  // What a rank holds of a parameter's gradient after the data-parallel reduction, and
  // sums with other groups: its shard (sharded data parallelism), its optimizer slice
  // (optimizer-state sharding), or all of it.
  double owned_fraction() const;

  void finish_step();

  const Job& job_;
  const ParallelConfig& pc_;
  const Placement& placement_;  // the job costs' placement
  ProgramOptions options_;
  RankProgram program_;
  // eb_: an element of the training precision; gb_: of a gradient (grad_reduce_in_fp32).
  double b_ = 0, eb_ = 0, gb_ = 0;
  LayerKindBytes stored_layer_bytes_;  // of a checkpointed layer, by its kind
  // Per kind of layer (dense, with experts): its gradient bucket, of which experts'.
  double layer_param_bytes_[2] = {0, 0}, expert_param_bytes_[2] = {0, 0};
  RankParameters rank_;  // one rank's parameters (parameter_count.hpp)
  int p_ = 1, v_ = 1, tp_ = 1, dp_ = 1, sdp_ = 1, ep_ = 1, edp_ = 1, stage_ = 0;  // edp_: expert-data degree
  int head_chunk_ = 1;  // chunk tag of the head's instructions (lm_head_stage: first)
  bool sharded_ = false, per_layer_ = false, head_first_ = false;
  bool split_ = false;  // the schedule splits backward into B and W (splits_backward)
  ShardingPlan sharding_;  // sharded data parallelism only
  const JobCosts& costs_;
  LayerTime layer_[2];  // dense, with experts
  HeadTime head_;
  // The plans' tensor collectives per pass (layer_plan.hpp), the job's costs' lists.
  const PlanCollectives layer_comm_[2], embedding_comm_, head_comm_;
  struct {
    double layer = 0, moe_layer = 0, embedding = 0, head = 0;
  } shard_gradient_;  // the plans' shard_gradient_params
  std::vector<int> outstanding_;
  // Per (kind, peer, head hop): the last send or copy started, -1 once awaited.
  struct LastIndex {
    int value = -1;
    operator int&() { return value; }
  };
  std::map<std::tuple<int, int, int>, LastIndex> last_of_kind_;
  int prefetched_ = -1;
  std::vector<std::pair<int, int>> backward_order_;  // (micro-batch, chunk) of this pass
  std::set<std::pair<int, int>> forwarded_;
  std::map<std::pair<int, int>, int> reloads_;         // -> index of the reload instruction
  std::map<std::tuple<int, int, int>, int> layer_reloads_;
};

}  // namespace partune::detail
