#include "partune/costmodel/program.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "partune/costmodel/collective.hpp"
#include "partune/costmodel/memory.hpp"
#include "partune/costmodel/op_cost.hpp"
#include "partune/costmodel/parameter_count.hpp"
#include "partune/costmodel/sharding.hpp"
#include "partune/costmodel/stage_cost.hpp"

#include "head_placement.hpp"

namespace partune {

namespace {

using detail::StageTimes;
using detail::Step;

// Builds one rank's program. Holds the per-job costs so each instruction is a lookup.
class ProgramBuilder {
 public:
  ProgramBuilder(const Job& job, int rank, const ProgramOptions& options)
      : job_(job),
        pc_(job.parallel),
        placement_(pc_.placement_strategy, job.data_parallel_degree(), pc_.pipeline_parallel_degree,
                   pc_.tensor_parallel_degree),
        options_(options),
        costs_(job) {
    program_.rank = rank;
    program_.coords = placement_.coords(rank);
    const ModelSpec& m = job.model;
    const Precision prec = job.training.precision;
    b_ = job.microbatch_size();
    p_ = pc_.pipeline_parallel_degree;
    v_ = pc_.virtual_stages;
    tp_ = pc_.tensor_parallel_degree;
    dp_ = job.data_parallel_degree();
    sdp_ = pc_.sharded_data_parallel_degree;
    stage_ = program_.coords.pipeline;
    layers_per_chunk_ = job.layers_per_chunk(stage_);
    head_first_ = job.lm_head_on_first_stage();
    head_chunk_ = v_;
    eb_ = bytes_per_element(prec);
    layer_[0] = costs_.layer_time(false);
    layer_[1] = costs_.layer_time(true);
    head_ = costs_.head_time();
    const PlanConfig plan = plan_config(job);
    const Checkpointing policy = pc_.activation_checkpointing;
    const LayerPlan& layer = costs_.layer(false);
    const LayerPlan embedding = embedding_plan(m, plan), head = head_plan(m, plan);
    for (bool moe : {false, true}) {
      const LayerPlan& l = costs_.layer(moe);
      layer_comm_[moe] = {tensor_collectives(l, PlanPass::forward), tensor_collectives(l, PlanPass::backward),
                          tensor_collectives(l, PlanPass::recompute, policy)};
      layer_param_bytes_[moe] = l.params() * eb_;  // a layer with experts: the rank's experts
      expert_param_bytes_[moe] = l.expert_params() * eb_;
    }
    rank_ = rank_parameters(layer, costs_.layer(true), embedding, head);
    ep_ = m.is_moe() ? pc_.expert_parallel_degree : 1;
    embedding_comm_ = {tensor_collectives(embedding, PlanPass::forward),
                       tensor_collectives(embedding, PlanPass::backward), {}};
    head_comm_ = {tensor_collectives(head, PlanPass::forward), tensor_collectives(head, PlanPass::backward), {}};
    shard_gradient_ = {layer.shard_gradient_params(), costs_.layer(true).shard_gradient_params(),
                       embedding.shard_gradient_params(), head.shard_gradient_params()};
    activation_bytes_ = b_ * m.seq_len * m.hidden * eb_;
    stored_layer_bytes_ = stored_layer_bytes(job, b_);  // of a checkpointed layer
    sharded_ = sdp_ > 1;
    if (sharded_) sharding_ = sharding_plan(job, layer);
    per_layer_ = sharded_ || options.granularity == Granularity::layer;
  }

  RankProgram build() {
    const std::vector<Step> steps = stage_steps();
    const int passes = job_.training.gradient_accumulation;
    // The last backward of each chunk in the step carries the gradient buckets.
    std::vector<int> last_backward(v_, -1);
    for (int i = 0; i < static_cast<int>(steps.size()); ++i)
      if (steps[i].kind == Step::backward) last_backward[steps[i].chunk] = i;
    for (int pass = 0; pass < passes; ++pass) {
      backward_order_.clear();
      for (const Step& s : steps)
        if (s.kind == Step::backward) backward_order_.push_back({pass * pc_.microbatches + s.microbatch, s.chunk});
      int backward_index = 0;
      for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
        const Step& s = steps[i];
        const int mb = pass * pc_.microbatches + s.microbatch;
        if (s.kind == Step::forward) {
          forward(mb, s.chunk);
        } else if (s.kind == Step::head) {
          head(mb);
        } else {
          const bool sync_gradients = pass == passes - 1 && i == last_backward[s.chunk];
          backward(mb, s.chunk, sync_gradients, backward_index++);
        }
      }
    }
    finish_step();
    return std::move(program_);
  }

 private:
  // Global position of this rank's chunk in the model (Megatron interleaving: chunk c of
  // stage s is model stage c * p + s).
  int model_stage(int chunk) const { return chunk * p_ + program_.coords.pipeline; }
  bool first_model_stage(int chunk) const { return model_stage(chunk) == 0; }
  bool last_model_stage(int chunk) const { return model_stage(chunk) == p_ * v_ - 1; }
  // The chunk's forward and backward include the LM head (lm_head_stage: last).
  bool runs_head(int chunk) const { return !head_first_ && last_model_stage(chunk); }
  // Layers of the chunk that are checkpointed (its first ones) and recomputed.
  int checkpointed(int chunk) const { return job_.checkpointed_layers_in_chunk(stage_, chunk); }

  // The schedule's steps for this stage; with the head on stage 0, stage 0's also hold
  // the head steps (place_head_steps).
  std::vector<Step> stage_steps() const {
    if (head_first_ && stage_ == 0) return place_head_steps(pc_, stage_times());
    std::vector<Step> out;
    for (const ScheduleStep& s : schedule_steps(pc_, stage_))
      out.push_back({s.forward ? Step::forward : Step::backward, s.microbatch, s.chunk});
    return out;
  }
  // What place_head_steps needs: every stage's slot for one micro-batch (stage_cost.hpp),
  // the head's time and one pipeline hop.
  StageTimes stage_times() const {
    StageTimes t;
    t.hop = costs_.pipeline_hop();
    t.head = head_.logits_fwd + head_.logits_bwd;
    for (int s = 0; s < p_; ++s) {
      StageCost c = costs_.cost(s);
      if (s == job_.lm_head_stage()) {  // the head runs as its own steps (t.head)
        c.forward -= head_.logits_fwd;
        c.backward -= head_.logits_bwd;
      }
      t.forward.push_back(c.forward_slot());
      t.backward.push_back(c.backward_slot());
    }
    return t;
  }

  int neighbour(int chunk, int direction) const {
    RankCoords c = program_.coords;
    c.pipeline = ((c.pipeline + direction) % p_ + p_) % p_;
    (void)chunk;
    return placement_.rank(c);
  }

  int push(Instruction in) {
    program_.ops.push_back(in);
    return static_cast<int>(program_.ops.size()) - 1;
  }
  void wait(int index) {
    if (index < 0) return;
    Instruction w;
    w.kind = OpKind::wait;
    w.wait_for = index;
    w.microbatch = program_.ops[index].microbatch;
    w.chunk = program_.ops[index].chunk;
    w.layer = program_.ops[index].layer;
    push(w);
    outstanding_.erase(std::remove(outstanding_.begin(), outstanding_.end(), index), outstanding_.end());
  }
  // Sends and copies of one kind go one at a time: the previous one is awaited before the
  // next starts (Megatron waits on each batched send/receive; a copy engine is FIFO).
  // This keeps at most one of each outstanding per rank.
  int start_after_previous(Instruction in) {
    // The head hop's sends stay unbounded: with GPipe, stage 0 takes them only after all
    // its forwards, and those forwards wait on the very stages that send them.
    if (in.chunk == head_chunk_ && (in.kind == OpKind::send_activation || in.kind == OpKind::send_gradient))
      return start_async(in);
    int& previous = last_of_kind_[{static_cast<int>(in.kind), in.peer, 0}];
    if (previous >= 0 && std::find(outstanding_.begin(), outstanding_.end(), previous) != outstanding_.end())
      wait(previous);
    previous = start_async(in);
    return previous;
  }

  int start_async(Instruction in) {
    in.async = true;
    const int i = push(in);
    outstanding_.push_back(i);
    return i;
  }

  Instruction compute(OpKind kind, int mb, int chunk, int layer, int layers, double seconds) const {
    Instruction in;
    in.kind = kind;
    in.microbatch = mb;
    in.chunk = static_cast<std::int16_t>(chunk);
    in.layer = static_cast<std::int16_t>(layer);
    in.layers = static_cast<std::int16_t>(layers);
    in.seconds = seconds;
    return in;
  }
  Instruction collective(OpKind kind, CommGroup group, double bytes, int count, int mb, int chunk,
                         int layer) const {
    Instruction in;
    in.kind = kind;
    in.group = group;
    in.bytes = bytes;
    in.count = count;
    in.microbatch = mb;
    in.chunk = static_cast<std::int16_t>(chunk);
    in.layer = static_cast<std::int16_t>(layer);
    return in;
  }
  // --- tensor-parallel collectives, from the layer plan (layer_plan.hpp).
  // The collectives of `parts` (plan pass lists, each `times` over), equal ones folded.
  struct Part {
    const std::vector<TensorCollective>* list;
    int times;
  };
  static std::vector<TensorCollective> gather(std::initializer_list<Part> parts, bool overlapped) {
    std::vector<TensorCollective> out;
    for (const Part& p : parts)
      for (const TensorCollective& c : *p.list)
        if (c.overlapped == overlapped) add_folded(out, c, p.times);
    return out;
  }
  static OpKind op_kind(CollectiveKind k) {
    return k == CollectiveKind::all_gather       ? OpKind::all_gather
           : k == CollectiveKind::reduce_scatter ? OpKind::reduce_scatter
           : k == CollectiveKind::all_to_all     ? OpKind::all_to_all
                                                 : OpKind::all_reduce;
  }
  static CommGroup comm_group(const TensorCollective& c) {
    return c.group == PlanGroup::expert ? CommGroup::expert : CommGroup::tensor;
  }
  // Is model layer `l` of `chunk` one with experts; the plan lists of each kind.
  bool moe(int chunk, int l) const { return job_.model.is_moe_layer(job_.global_layer(stage_, chunk, l)); }
  // The blocking collectives after a compute instruction.
  void tensor_collectives_after(std::initializer_list<Part> parts, int mb, int chunk, int layer) {
    for (const TensorCollective& c : gather(parts, false))
      push(collective(op_kind(c.kind), comm_group(c), c.bytes, c.count, mb, chunk, layer));
  }
  // The overlapped ones (sequence-parallel re-gathers) start before the compute they run
  // beside; the returned indices are awaited after it (wait_all).
  std::vector<int> tensor_collectives_beside(std::initializer_list<Part> parts, int mb, int chunk, int layer) {
    std::vector<int> started;
    for (const TensorCollective& c : gather(parts, true))
      started.push_back(start_async(collective(op_kind(c.kind), comm_group(c), c.bytes, c.count, mb, chunk, layer)));
    return started;
  }
  void wait_all(const std::vector<int>& indices) {
    for (int i : indices) wait(i);
  }
  Instruction p2p(OpKind kind, int peer, int mb, int chunk) const {
    Instruction in;
    in.kind = kind;
    in.peer = peer;
    in.bytes = activation_bytes_ / tp_;  // scatter-gather over the tensor-parallel group
    in.microbatch = mb;
    in.chunk = static_cast<std::int16_t>(chunk);
    return in;
  }

  // --- sharded data parallel (sharding.hpp): each layer's gather units are gathered
  // before use; the next layer's gather is started (prefetched) before this layer's
  // kernels, or after them / not at all in backward as the flavour's prefetch says.
  void gather_layer(int mb, int chunk, int layer, int layers_in_chunk, bool descending) {
    if (prefetched_ < 0) prefetched_ = start_gather(mb, chunk, layer);
    wait(prefetched_);
    prefetched_ = -1;
    if (descending && !sharding_.backward_prefetch_before_compute) return;  // prefetch_after
    prefetch(mb, chunk, descending ? layer - 1 : layer + 1, layers_in_chunk, descending);
  }
  void prefetch(int mb, int chunk, int next, int layers_in_chunk, bool descending) {
    if (descending && !sharding_.backward_prefetch) return;
    if (next >= 0 && next < layers_in_chunk) prefetched_ = start_gather(mb, chunk, next);
  }
  // With offload_parameters the layer's shard comes from the host first (its gather
  // starts once it is on the device).
  int start_gather(int mb, int chunk, int layer) {
    Instruction gather = sharded_gather(mb, chunk, layer);
    if (pc_.offload_parameters) {
      Instruction in = copy_of(OpKind::reload_parameters, gather.bytes * gather.count / sdp_);
      in.microbatch = mb;
      in.chunk = static_cast<std::int16_t>(chunk);
      in.layer = static_cast<std::int16_t>(layer);
      push(in);
    }
    return start_async(gather);
  }
  // A blocking device<->host copy of states (offload_optimizer, offload_parameters).
  static Instruction copy_of(OpKind kind, double bytes) {
    Instruction in;
    in.kind = kind;
    in.bytes = bytes;
    return in;
  }
  // The embedding and head weights are sharded too: one more unit with the layer beside
  // them. A call's bytes are the mean of the instruction's units (count calls).
  Instruction sharded_gather(int mb, int chunk, int layer) const {
    const double extra = extra_param_bytes(chunk, layer);
    const int calls = sharding_.gather_calls() + (extra > 0 ? 1 : 0);
    const double bytes = sharding_.gathered * eb_ + extra;
    // No call at all when every parameter persists (a small layer under SMP's 1e6).
    return collective(OpKind::all_gather, CommGroup::sharded, calls > 0 ? bytes / calls : 0.0, calls, mb, chunk,
                      layer);
  }
  // The layer's gradients (all of its parameters, persistent ones too) in the flavour's
  // reduce-scatter calls, the embedding's or head's in one more.
  Instruction sharded_reduce(int mb, int chunk, int layer) const {
    const double extra = extra_param_bytes(chunk, layer);
    const int calls = sharding_.reduce_calls + (extra > 0 ? 1 : 0);
    const double bytes = sharding_.reduce_calls * sharding_.reduce_elements * eb_ + extra;
    return collective(OpKind::reduce_scatter, CommGroup::sharded, bytes / calls, calls, mb, chunk, layer);
  }

  void forward(int mb, int chunk) {
    if (!first_model_stage(chunk)) push(p2p(OpKind::recv_activation, neighbour(chunk, -1), mb, chunk));
    const double extra = (first_model_stage(chunk) ? head_.embedding_fwd : 0.0) +
                         (runs_head(chunk) ? head_.logits_fwd : 0.0);
    const int embedding = first_model_stage(chunk) ? 1 : 0, head = runs_head(chunk) ? 1 : 0;
    const int ckpt = checkpointed(chunk);
    if (per_layer_) {
      for (int l = 0; l < layers_per_chunk_; ++l) {
        if (sharded_) gather_layer(mb, chunk, l, layers_per_chunk_, false);
        const int first = l == 0 ? embedding : 0, last = l == layers_per_chunk_ - 1 ? head : 0;
        const bool e = moe(chunk, l);
        push(compute(OpKind::forward, mb, chunk, l, 1,
                     layer_[e].forward() + first * head_.embedding_fwd + last * head_.logits_fwd));
        tensor_collectives_after({{&embedding_comm_.forward, first}, {&layer_comm_[e].forward, 1},
                                  {&head_comm_.forward, last}},
                                 mb, chunk, l);
        if (offloading() && l < ckpt) start_after_previous(copy(OpKind::offload, mb, chunk, l));
      }
    } else {
      const LayerMix mix = job_.chunk_mix(stage_, chunk, 0, layers_per_chunk_);
      push(compute(OpKind::forward, mb, chunk, -1, layers_per_chunk_,
                   mix.dense * layer_[0].forward() + mix.moe * layer_[1].forward() + extra));
      tensor_collectives_after({{&embedding_comm_.forward, embedding},
                                {&layer_comm_[0].forward, mix.dense},
                                {&layer_comm_[1].forward, mix.moe},
                                {&head_comm_.forward, head}},
                               mb, chunk, -1);
    }
    if (offloading() && !per_layer_ && ckpt > 0) start_after_previous(copy(OpKind::offload, mb, chunk, -1));
    if (!last_model_stage(chunk)) {
      start_after_previous(p2p(OpKind::send_activation, neighbour(chunk, +1), mb, chunk));
    } else if (head_first_) {
      // The head runs on stage 0: the output goes there (the head's own chunk tag).
      start_after_previous(p2p(OpKind::send_activation, neighbour(chunk, +1), mb, head_chunk_));
    }
    forwarded_.insert({mb, chunk});
  }

  // lm_head_stage: first, on stage 0: the LM head of one micro-batch, forward and
  // backward back to back, between the last stage's activation and its gradient. Every
  // instruction carries chunk = virtual_stages (the head's own chunk).
  void head(int mb) {
    const int last = neighbour(0, -1);
    push(p2p(OpKind::recv_activation, last, mb, head_chunk_));
    if (sharded_) {
      // The tied weight is sharded: gather it for the head (its gradient joins the
      // embedding's reduce-scatter with layer 0's backward).
      const double bytes = (embedding_params(0) + head_params(0)) * eb_;
      if (pc_.offload_parameters) {  // its shard comes from the host first, as every gather's
        Instruction in = copy_of(OpKind::reload_parameters, bytes / sdp_);
        in.microbatch = mb;
        in.chunk = static_cast<std::int16_t>(head_chunk_);
        push(in);
      }
      const int g = start_async(collective(OpKind::all_gather, CommGroup::sharded, bytes, 1, mb, head_chunk_, -1));
      wait(g);
    }
    push(compute(OpKind::forward, mb, head_chunk_, -1, 0, head_.logits_fwd));
    tensor_collectives_after({{&head_comm_.forward, 1}}, mb, head_chunk_, -1);
    const std::vector<int> beside = tensor_collectives_beside({{&head_comm_.backward, 1}}, mb, head_chunk_, -1);
    push(compute(OpKind::backward, mb, head_chunk_, -1, 0, head_.logits_bwd));
    wait_all(beside);
    tensor_collectives_after({{&head_comm_.backward, 1}}, mb, head_chunk_, -1);
    start_after_previous(p2p(OpKind::send_gradient, last, mb, head_chunk_));
  }

  bool offloading() const {
    return pc_.offload_activations && pc_.activation_checkpointing != Checkpointing::none;
  }
  // A device<->host copy of what checkpointing keeps: one checkpointed layer's, or the
  // chunk's (-1: its checkpointed layers, the chunk's first ones).
  Instruction copy(OpKind kind, int mb, int chunk, int layer) const {
    const int layers = layer < 0 ? checkpointed(chunk) : 1;
    Instruction in;
    in.kind = kind;
    in.bytes = stored_layer_bytes_ * layers;
    in.microbatch = mb;
    in.chunk = static_cast<std::int16_t>(chunk);
    in.layer = static_cast<std::int16_t>(layer);
    in.layers = static_cast<std::int16_t>(layers);
    return in;
  }
  // Per layer: reloads run activation_loading_horizon layers ahead of the backward, for
  // the checkpointed layers (the others never left the device).
  void reload_layers_from(int mb, int chunk, int layer) {
    const int ckpt = checkpointed(chunk);
    for (int j = std::min(layer, ckpt - 1); j >= 0 && j > layer - pc_.activation_loading_horizon; --j) {
      const auto key = std::make_tuple(mb, chunk, j);
      if (!layer_reloads_.count(key)) layer_reloads_[key] = start_async(copy(OpKind::reload, mb, chunk, j));
    }
    if (layer < ckpt) wait(layer_reloads_.at(std::make_tuple(mb, chunk, layer)));
  }

  void backward(int mb, int chunk, bool sync_gradients, int backward_index) {
    if (!last_model_stage(chunk)) {
      push(p2p(OpKind::recv_gradient, neighbour(chunk, +1), mb, chunk));
    } else if (head_first_) {
      push(p2p(OpKind::recv_gradient, neighbour(chunk, +1), mb, head_chunk_));  // from stage 0's head
    }
    const int ckpt = checkpointed(chunk);
    if (offloading() && !per_layer_ && ckpt > 0) {
      // Reloads run activation_loading_horizon layers ahead of backward (whole chunks:
      // at least the next one), for activations whose forward has already run.
      const int ahead = std::max(1, (pc_.activation_loading_horizon + layers_per_chunk_ - 1) / layers_per_chunk_);
      const int last = std::min<int>(backward_index + ahead, static_cast<int>(backward_order_.size()) - 1);
      for (int j = backward_index; j <= last; ++j) {
        const auto key = backward_order_[j];
        if (!reloads_.count(key) && checkpointed(key.second) > 0 && (j == backward_index || forwarded_.count(key)))
          reloads_[key] = start_async(copy(OpKind::reload, key.first, key.second, -1));
      }
      wait(reloads_.at({mb, chunk}));
    }
    const bool buckets = sync_gradients && dp_ > 1 && !sharded_;
    if (per_layer_ || buckets) {
      // Backward runs from the chunk's last layer to its first.
      for (int l = layers_per_chunk_ - 1; l >= 0; --l) backward_layer(mb, chunk, l, buckets);
    } else {
      backward_chunk(mb, chunk);
    }
    if (!first_model_stage(chunk)) start_after_previous(p2p(OpKind::send_gradient, neighbour(chunk, -1), mb, chunk));
  }

  // One layer's backward: its weights gathered (sharded), its activations reloaded
  // (offload), its recompute if checkpointed (the chunk's first `ckpt` layers), the
  // kernels with the plan's tensor collectives around them, then its gradient bucket.
  void backward_layer(int mb, int chunk, int l, bool buckets) {
    const bool e = moe(chunk, l);
    const double recompute = layer_[e].recompute(pc_.activation_checkpointing);
    if (sharded_) gather_layer(mb, chunk, l, layers_per_chunk_, true);
    if (offloading() && per_layer_) reload_layers_from(mb, chunk, l);
    if (recompute > 0 && l < checkpointed(chunk)) {
      push(compute(OpKind::recompute, mb, chunk, l, 1, recompute));
      tensor_collectives_after({{&layer_comm_[e].recompute, 1}}, mb, chunk, l);
    }
    const int first = l == 0 && first_model_stage(chunk) ? 1 : 0;
    const int last = l == layers_per_chunk_ - 1 && runs_head(chunk) ? 1 : 0;
    const std::initializer_list<Part> parts = {
        {&head_comm_.backward, last}, {&layer_comm_[e].backward, 1}, {&embedding_comm_.backward, first}};
    const std::vector<int> beside = tensor_collectives_beside(parts, mb, chunk, l);
    push(compute(OpKind::backward, mb, chunk, l, 1,
                 layer_[e].backward() + last * head_.logits_bwd + first * head_.embedding_bwd));
    wait_all(beside);
    tensor_collectives_after(parts, mb, chunk, l);
    // A layer with experts reduces its experts' gradients over the expert-data group.
    const double experts = ep_ > 1 ? expert_param_bytes_[e] : 0.0;
    const double bucket = layer_param_bytes_[e] - experts + extra_param_bytes(chunk, l);
    if (sharded_) {
      start_async(sharded_reduce(mb, chunk, l));
      if (!sharding_.backward_prefetch_before_compute) prefetch(mb, chunk, l - 1, layers_per_chunk_, true);
    } else if (buckets) {
      // One gradient bucket per layer, reduced while the layers below run backward.
      const OpKind k = pc_.shard_optimizer_state ? OpKind::reduce_scatter : OpKind::all_reduce;
      start_async(collective(k, CommGroup::data, bucket, 1, -1, chunk, l));
      if (experts > 0 && dp_ > ep_) start_async(collective(k, CommGroup::expert_data, experts, 1, -1, chunk, l));
    }
  }

  // A whole chunk's backward as one instruction (chunk granularity): the recompute of its
  // checkpointed layers first, as one instruction too.
  void backward_chunk(int mb, int chunk) {
    const Checkpointing policy = pc_.activation_checkpointing;
    const int ckpt = checkpointed(chunk);
    const LayerMix k = job_.chunk_mix(stage_, chunk, 0, ckpt), mix = job_.chunk_mix(stage_, chunk, 0, layers_per_chunk_);
    const double recompute = k.dense * layer_[0].recompute(policy) + k.moe * layer_[1].recompute(policy);
    if (recompute > 0 && ckpt > 0) {
      push(compute(OpKind::recompute, mb, chunk, -1, ckpt, recompute));
      tensor_collectives_after({{&layer_comm_[0].recompute, k.dense}, {&layer_comm_[1].recompute, k.moe}}, mb, chunk,
                               -1);
    }
    const int first = first_model_stage(chunk) ? 1 : 0, last = runs_head(chunk) ? 1 : 0;
    const std::initializer_list<Part> parts = {{&head_comm_.backward, last},
                                               {&layer_comm_[0].backward, mix.dense},
                                               {&layer_comm_[1].backward, mix.moe},
                                               {&embedding_comm_.backward, first}};
    const std::vector<int> beside = tensor_collectives_beside(parts, mb, chunk, -1);
    push(compute(OpKind::backward, mb, chunk, -1, layers_per_chunk_,
                 mix.dense * layer_[0].backward() + mix.moe * layer_[1].backward() + first * head_.embedding_bwd +
                     last * head_.logits_bwd));
    wait_all(beside);
    tensor_collectives_after(parts, mb, chunk, -1);
  }

  // Embedding and head parameters a chunk holds besides its layers (a tied embedding is
  // kept on both pipeline ends when the head is on the last stage, as Megatron does; a
  // head on the first stage uses the embedding itself).
  double embedding_params(int chunk) const { return first_model_stage(chunk) ? rank_.embedding : 0.0; }
  double head_params(int chunk) const {
    if (head_first_) return first_model_stage(chunk) ? rank_.head : 0.0;
    if (!last_model_stage(chunk)) return 0.0;
    return rank_.head + (p_ > 1 && job_.model.tied_embeddings ? rank_.head_projection : 0.0);
  }
  // They travel with the gradient bucket of the layer next to them (bucket_extras).
  double extra_param_bytes(int chunk, int layer) const {
    const BucketExtras extras = bucket_extras(job_, stage_, chunk, layer);
    return ((extras.embedding ? embedding_params(chunk) : 0.0) + (extras.head ? head_params(chunk) : 0.0)) * eb_;
  }

  // This rank holds one of the two copies of a tied embedding: pipeline > 1 with the head
  // on the last stage, and this is the first or the last stage.
  bool tied_copies() const {
    return job_.model.tied_embeddings && p_ > 1 && !head_first_ && (stage_ == 0 || stage_ == p_ - 1);
  }

  bool holds_head(int chunk) const { return head_first_ ? first_model_stage(chunk) : last_model_stage(chunk); }
  // What a rank holds of a parameter's gradient after the data-parallel reduction, and
  // sums with other groups: its shard (sharded data parallelism), its optimizer slice
  // (optimizer-state sharding), or all of it.
  double owned_fraction() const {
    if (sharded_) return 1.0 / sdp_;
    return pc_.shard_optimizer_state ? 1.0 / dp_ : 1.0;
  }

  void finish_step() {
    // Every gradient bucket, send and copy completes before the optimizer runs.
    while (!outstanding_.empty()) wait(outstanding_.front());
    double params = 0, experts = 0;  // experts: reduced over the expert-data group
    for (int c = 0; c < v_; ++c) {
      const LayerMix mix = job_.chunk_mix(stage_, c, 0, layers_per_chunk_);
      params += (mix.dense * layer_param_bytes_[0] + mix.moe * layer_param_bytes_[1]) / eb_ + embedding_params(c) +
                head_params(c);
      experts += mix.moe * expert_param_bytes_[1] / eb_;
    }
    // (= stage_parameter_count(job, stage): the memory model's count.)
    if (sharded_ && dp_ > sdp_) {
      push(collective(OpKind::all_reduce, CommGroup::replica, params / sdp_ * eb_, 1, -1, 0, -1));
    }
    // Sequence parallelism: the replicated parameters used on sequence shards (the plans'
    // shard_gradient_params) hold their shard's gradient, summed over the tensor group
    // once every bucket is reduced (Megatron's _allreduce_layernorm_grads). The one
    // tensor collective without a micro-batch.
    double shard_params = 0;
    for (int c = 0; c < v_; ++c) {
      const LayerMix mix = job_.chunk_mix(stage_, c, 0, layers_per_chunk_);
      shard_params += mix.dense * shard_gradient_.layer + mix.moe * shard_gradient_.moe_layer +
                      (first_model_stage(c) ? shard_gradient_.embedding : 0.0) +
                      (holds_head(c) ? shard_gradient_.head : 0.0);
    }
    if (shard_params > 0)
      push(collective(OpKind::all_reduce, CommGroup::tensor, shard_params * eb_ * owned_fraction(), 1, -1, 0, -1));
    if (tied_copies()) {
      // The tied embedding lives on both pipeline ends (embedding_params / head_params);
      // their gradients are summed before either updates, so the copies stay equal.
      const double bytes = rank_.head_projection * eb_ * owned_fraction();  // the token table's shard
      push(collective(OpKind::all_reduce, CommGroup::embedding, bytes, 1, -1, 0, -1));
    }
    const double local =
        (params - experts) * job_.optimizer_shard_fraction() + experts * job_.expert_optimizer_shard_fraction();
    const TrainingConfig& t = job_.training;
    if (pc_.offload_optimizer) {
      // ZeRO-Offload: the gradient shard goes to the host, the host steps, and the updated
      // 16-bit shard comes back (it stays there with offload_parameters: gathered from it).
      push(copy_of(OpKind::offload_gradients, local * eb_));
      push(compute(OpKind::optimizer_step, -1, 0, -1, 0,
                   host_optimizer_time(job_.cluster.instance, t.optimizer, t.precision, local)));
      if (!pc_.offload_parameters) push(copy_of(OpKind::reload_parameters, local * eb_));
    } else {
      push(compute(OpKind::optimizer_step, -1, 0, -1, 0,
                   optimizer_time(job_.cluster.instance.gpu, t.optimizer, t.precision, local)));
    }
    if (!sharded_ && pc_.shard_optimizer_state && dp_ > 1) {
      // Each rank updated its slice; gather the new weights back.
      const double gathered = ep_ > 1 ? params - experts : params;
      push(collective(OpKind::all_gather, CommGroup::data, gathered * eb_, 1, -1, 0, -1));
      if (ep_ > 1 && dp_ > ep_) push(collective(OpKind::all_gather, CommGroup::expert_data, experts * eb_, 1, -1, 0, -1));
    }
  }

  const Job& job_;
  const ParallelConfig& pc_;
  Placement placement_;
  ProgramOptions options_;
  RankProgram program_;
  double b_ = 0, eb_ = 0, activation_bytes_ = 0, stored_layer_bytes_ = 0;
  // Per kind of layer (dense, with experts): its gradient bucket, of which experts'.
  double layer_param_bytes_[2] = {0, 0}, expert_param_bytes_[2] = {0, 0};
  RankParameters rank_;  // one rank's parameters (parameter_count.hpp)
  int p_ = 1, v_ = 1, tp_ = 1, dp_ = 1, sdp_ = 1, ep_ = 1, stage_ = 0, layers_per_chunk_ = 0;
  int head_chunk_ = 1;  // chunk tag of the head's instructions (lm_head_stage: first)
  bool sharded_ = false, per_layer_ = false, head_first_ = false;
  ShardingPlan sharding_;  // sharded data parallelism only
  StageCostModel costs_;
  LayerTime layer_[2];  // dense, with experts
  HeadTime head_;
  // The plans' tensor collectives per pass (layer_plan.hpp).
  struct PlanComm {
    std::vector<TensorCollective> forward, backward, recompute;
  };
  PlanComm layer_comm_[2], embedding_comm_, head_comm_;
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

}  // namespace

RankProgram build_program(const Job& job, int rank, const ProgramOptions& options) {
  return ProgramBuilder(job, rank, options).build();
}

std::vector<RankProgram> build_programs(const Job& job, const ProgramOptions& options) {
  std::vector<RankProgram> programs;
  programs.reserve(job.world_size());
  for (int r = 0; r < job.world_size(); ++r) programs.push_back(build_program(job, r, options));
  return programs;
}

}  // namespace partune
