#include "program_builder_class.hpp"

// The program builder's set-up, its walk over the schedule's steps, and the forward and
// head steps with their sends and receives (program_builder_class.hpp has the class).
namespace partune::detail {

ProgramBuilder::ProgramBuilder(const JobCosts& costs, int rank, const ProgramOptions& options)
    : job_(costs.job()),
      pc_(job_.parallel),
      placement_(costs.placement()),
      options_(options),
      costs_(costs),
      layer_comm_{costs.layer_collectives(false), costs.layer_collectives(true)},
      embedding_comm_(costs.embedding_collectives()),
      head_comm_(costs.head_collectives()) {
  const Job& job = job_;
  program_.rank = rank;
  program_.coords = placement_.coords(rank);
  const ModelSpec& m = job.model;
  const Precision prec = job.training.precision;
  b_ = job.microbatch_size();
  p_ = pc_.pipeline_parallel_degree;
  v_ = pc_.virtual_stages;
  tp_ = pc_.tensor_parallel_degree;
  dp_ = job.data_context_degree();  // the gradients' group: data x context ranks
  sdp_ = pc_.sharded_data_parallel_degree;
  stage_ = program_.coords.pipeline;
  head_first_ = job.lm_head_on_first_stage();
  head_chunk_ = v_;
  eb_ = bytes_per_element(prec);
  gb_ = job.gradient_bytes_per_element();
  layer_[0] = costs_.layer_time(false);
  layer_[1] = costs_.layer_time(true);
  head_ = costs_.head_time();
  const LayerPlan& layer = costs_.layer(false);
  const LayerPlan &embedding = costs_.embedding(), &head = costs_.head();
  for (bool moe : {false, true}) {
    const LayerPlan& l = costs_.layer(moe);
    layer_param_bytes_[moe] = l.params() * gb_;  // a layer with experts: the rank's experts
    expert_param_bytes_[moe] = l.expert_params() * gb_;
  }
  rank_ = costs_.rank();
  ep_ = m.is_moe() ? pc_.expert_parallel_degree : 1;
  edp_ = ep_ > 1 ? job.expert_data_parallel_degree() : dp_;
  shard_gradient_ = {layer.shard_gradient_params(), costs_.layer(true).shard_gradient_params(),
                     embedding.shard_gradient_params(), head.shard_gradient_params()};
  stored_layer_bytes_ = stored_layer_bytes_by_kind(job, layer, costs_.layer(true));  // of a checkpointed layer
  sharded_ = sdp_ > 1;
  if (sharded_) sharding_ = sharding_plan(job, layer);
  per_layer_ = sharded_ || options.granularity == Granularity::layer;
  split_ = splits_backward(pc_.pipeline);
}

RankProgram ProgramBuilder::build() {
  const std::vector<Step> steps = stage_steps();
  const int passes = job_.training.gradient_accumulation;
  // The last backward of each chunk in the step carries the gradient buckets (its last W
  // when the schedule splits backward); with gradient sharding (ZeRO-2) every one does,
  // each reduce-scattering into the rank's slice.
  const Step::Kind syncing = split_ ? Step::weight : Step::backward;
  std::vector<int> last_backward(v_, -1);
  for (int i = 0; i < static_cast<int>(steps.size()); ++i)
    if (steps[i].kind == syncing) last_backward[steps[i].chunk] = i;
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
        const bool sync_gradients =
            (pc_.shard_gradients && s.kind == syncing) || (pass == passes - 1 && i == last_backward[s.chunk]);
        if (s.kind == Step::weight) backward_weight(mb, s.chunk, sync_gradients);
        else backward(mb, s.chunk, sync_gradients, backward_index++);
      }
    }
  }
  finish_step();
  return std::move(program_);
}

std::vector<Step> ProgramBuilder::stage_steps() const {
  if (head_first_ && stage_ == 0) return place_head_steps(pc_, stage_times());
  std::vector<Step> out;
  for (const ScheduleStep& s : schedule_steps(pc_, stage_))
    out.push_back({s.forward ? Step::forward : s.weight ? Step::weight : Step::backward, s.microbatch, s.chunk});
  return out;
}

StageTimes ProgramBuilder::stage_times() const {
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

int ProgramBuilder::neighbour(int chunk, int direction) const {
  RankCoords c = program_.coords;
  const int k = model_stage(chunk) + direction;
  if (k >= 0 && k < p_ * v_) c.pipeline = chunk_position(pc_, k).stage;
  else c.pipeline = ((c.pipeline + direction) % p_ + p_) % p_;  // the last stage to the head on stage 0, and back
  return placement_.rank(c);
}

int ProgramBuilder::push(Instruction in) {
  program_.ops.push_back(in);
  return static_cast<int>(program_.ops.size()) - 1;
}

void ProgramBuilder::wait(int index) {
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

int ProgramBuilder::start_after_previous(Instruction in) {
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

int ProgramBuilder::start_async(Instruction in) {
  in.async = true;
  const int i = push(in);
  outstanding_.push_back(i);
  return i;
}

Instruction ProgramBuilder::compute(OpKind kind, int mb, int chunk, int layer, int layers, double seconds) const {
  Instruction in;
  in.kind = kind;
  in.microbatch = mb;
  in.chunk = static_cast<std::int16_t>(chunk);
  in.layer = static_cast<std::int16_t>(layer);
  in.layers = static_cast<std::int16_t>(layers);
  in.seconds = seconds;
  return in;
}

Instruction ProgramBuilder::p2p(OpKind kind, int peer, int mb, int chunk) const {
  Instruction in;
  in.kind = kind;
  in.peer = peer;
  in.bytes = costs_.hop_bytes();  // the plan's activation, scatter-gathered over the tensor group
  in.microbatch = mb;
  in.chunk = static_cast<std::int16_t>(chunk);
  in.posted_early = pc_.overlap_p2p_comm && (kind == OpKind::recv_activation || kind == OpKind::recv_gradient);
  return in;
}

void ProgramBuilder::forward(int mb, int chunk) {
  if (!first_model_stage(chunk) && !local(chunk, -1))
    push(p2p(OpKind::recv_activation, neighbour(chunk, -1), mb, chunk));
  const double extra = (first_model_stage(chunk) ? head_.embedding_fwd : 0.0) +
                       (runs_head(chunk) ? head_.logits_fwd : 0.0);
  const int embedding = first_model_stage(chunk) ? 1 : 0, head = runs_head(chunk) ? 1 : 0;
  const int ckpt = checkpointed(chunk);
  const int n = layers(chunk);
  if (per_layer_ && n > 0) {
    for (int l = 0; l < n; ++l) {
      if (sharded_) gather_layer(mb, chunk, l, n, false);
      const int first = l == 0 ? embedding : 0, last = l == n - 1 ? head : 0;
      const bool e = moe(chunk, l);
      compute_with_collectives(compute(OpKind::forward, mb, chunk, l, 1,
                                       layer_[e].forward() + first * head_.embedding_fwd + last * head_.logits_fwd +
                                           gather_copy_seconds(chunk, l)),
                               {{&embedding_comm_.forward, first}, {&layer_comm_[e].forward, 1},
                                {&head_comm_.forward, last}});
      if (offloading() && l < ckpt) start_after_previous(copy(OpKind::offload, mb, chunk, l));
    }
  } else {
    const LayerMix mix = job_.chunk_mix(stage_, chunk, 0, n);
    compute_with_collectives(compute(OpKind::forward, mb, chunk, -1, n,
                                     mix.dense * layer_[0].forward() + mix.moe * layer_[1].forward() + extra),
                             {{&embedding_comm_.forward, embedding},
                              {&layer_comm_[0].forward, mix.dense},
                              {&layer_comm_[1].forward, mix.moe},
                              {&head_comm_.forward, head}});
  }
  if (offloading() && !per_layer_ && ckpt > 0) start_after_previous(copy(OpKind::offload, mb, chunk, -1));
  if (!last_model_stage(chunk)) {
    if (!local(chunk, +1)) start_after_previous(p2p(OpKind::send_activation, neighbour(chunk, +1), mb, chunk));
  } else if (head_first_) {
    // The head runs on stage 0: the output goes there (the head's own chunk tag).
    start_after_previous(p2p(OpKind::send_activation, neighbour(chunk, +1), mb, head_chunk_));
  }
  forwarded_.insert({mb, chunk});
}

void ProgramBuilder::head(int mb) {
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

}  // namespace partune::detail

namespace partune {

RankProgram build_program(const JobCosts& costs, int rank, const ProgramOptions& options) {
  return detail::ProgramBuilder(costs, rank, options).build();
}

RankProgram build_program(const Job& job, int rank, const ProgramOptions& options) {
  return build_program(JobCosts(job), rank, options);
}

std::vector<RankProgram> build_programs(const JobCosts& costs, const ProgramOptions& options) {
  const int ranks = costs.job().world_size();
  std::vector<RankProgram> programs;
  programs.reserve(ranks);
  for (int r = 0; r < ranks; ++r) programs.push_back(build_program(costs, r, options));
  return programs;
}

std::vector<RankProgram> build_programs(const Job& job, const ProgramOptions& options) {
  return build_programs(JobCosts(job), options);
}

}  // namespace partune
