// The program builder's backward: per chunk or per layer, with recompute under checkpointing
// and the activation offload/reload copies. program_builder_class.hpp has the class.
#include "program_builder_class.hpp"

namespace partune::detail {

bool ProgramBuilder::offloading() const {
  return pc_.offload_activations && pc_.activation_checkpointing != Checkpointing::none;
}

Instruction ProgramBuilder::copy(OpKind kind, int mb, int chunk, int layer) const {
  const int layers = layer < 0 ? checkpointed(chunk) : 1;
  Instruction in;
  in.kind = kind;
  in.bytes = stored_layer_bytes_.of(job_.chunk_mix(stage_, chunk, layer < 0 ? 0 : layer, layers));
  in.microbatch = mb;
  in.chunk = static_cast<std::int16_t>(chunk);
  in.layer = static_cast<std::int16_t>(layer);
  in.layers = static_cast<std::int16_t>(layers);
  return in;
}

void ProgramBuilder::reload_layers_from(int mb, int chunk, int layer) {
  const int ckpt = checkpointed(chunk);
  for (int j = std::min(layer, ckpt - 1); j >= 0 && j > layer - pc_.activation_loading_horizon; --j) {
    const auto key = std::make_tuple(mb, chunk, j);
    if (!layer_reloads_.count(key)) layer_reloads_[key] = start_async(copy(OpKind::reload, mb, chunk, j));
  }
  if (layer < ckpt) wait(layer_reloads_.at(std::make_tuple(mb, chunk, layer)));
}

void ProgramBuilder::backward(int mb, int chunk, bool sync_gradients, int backward_index) {
  if (!last_model_stage(chunk)) {
    if (!local(chunk, +1)) push(p2p(OpKind::recv_gradient, neighbour(chunk, +1), mb, chunk));
  } else if (head_first_) {
    push(p2p(OpKind::recv_gradient, neighbour(chunk, +1), mb, head_chunk_));  // from stage 0's head
  }
  const int ckpt = checkpointed(chunk), n = layers(chunk);
  if (offloading() && !per_layer_ && ckpt > 0) {
    // Reloads run activation_loading_horizon layers ahead of backward (whole chunks:
    // at least the next one), for activations whose forward has already run.
    const int ahead = std::max(1, (pc_.activation_loading_horizon + n - 1) / n);
    const int last = std::min<int>(backward_index + ahead, static_cast<int>(backward_order_.size()) - 1);
    for (int j = backward_index; j <= last; ++j) {
      const auto key = backward_order_[j];
      if (!reloads_.count(key) && checkpointed(key.second) > 0 && (j == backward_index || forwarded_.count(key)))
        reloads_[key] = start_async(copy(OpKind::reload, key.first, key.second, -1));
    }
    wait(reloads_.at({mb, chunk}));
  }
  const bool buckets = sync_gradients && dp_ > 1 && !sharded_ && !split_;  // split: with the W's
  if ((per_layer_ || buckets) && n > 0) {
    // Backward runs from the chunk's last layer to its first.
    for (int l = n - 1; l >= 0; --l) backward_layer(mb, chunk, l, buckets);
  } else {
    backward_chunk(mb, chunk);
    // A chunk without layers (the embedding or the head alone): its parameters' bucket.
    if (buckets && n == 0) extra_buckets(chunk);
  }
  if (!first_model_stage(chunk) && !local(chunk, -1))
    start_after_previous(p2p(OpKind::send_gradient, neighbour(chunk, -1), mb, chunk));
}

void ProgramBuilder::backward_layer(int mb, int chunk, int l, bool buckets) {
  const bool e = moe(chunk, l);
  const double recompute = layer_[e].recompute(pc_.activation_checkpointing);
  if (sharded_) gather_layer(mb, chunk, l, layers(chunk), true);
  if (offloading() && per_layer_) reload_layers_from(mb, chunk, l);
  if (recompute > 0 && l < checkpointed(chunk)) {
    compute_with_collectives(compute(OpKind::recompute, mb, chunk, l, 1, recompute), {{&layer_comm_[e].recompute, 1}});
  }
  const int first = l == 0 && first_model_stage(chunk) ? 1 : 0;
  const int last = l == layers(chunk) - 1 && runs_head(chunk) ? 1 : 0;
  const std::initializer_list<Part> parts = {
      {&head_comm_.backward, last}, {&layer_comm_[e].backward, 1}, {&embedding_comm_.backward, first}};
  compute_with_collectives(compute(OpKind::backward, mb, chunk, l, 1,
                                   backward_seconds(e) + last * head_backward_seconds() + first * head_.embedding_bwd +
                                       gather_copy_seconds(chunk, l) + reduce_copy_seconds(chunk, l)),
                           parts);
  if (sharded_) {
    start_async(sharded_reduce(mb, chunk, l));
    if (!sharding_.backward_prefetch_before_compute) prefetch(mb, chunk, l - 1, layers(chunk), true);
  } else if (buckets) {
    layer_buckets(chunk, l);
  }
}

void ProgramBuilder::layer_buckets(int chunk, int l) {
  // One gradient bucket per layer, reduced while the layers below run backward. A layer
  // with experts reduces its experts' gradients over the expert-data group.
  const bool e = moe(chunk, l);
  const double experts = (ep_ > 1 ? expert_param_bytes_[e] : 0.0) + extra_expert_bytes(chunk, l);
  const double bucket = layer_param_bytes_[e] - experts + extra_gradient_bytes(chunk, l);
  start_async(gradient_bucket(CommGroup::data, bucket, chunk, l));
  if (experts > 0 && edp_ > 1) start_async(gradient_bucket(CommGroup::expert_data, experts, chunk, l));
}

void ProgramBuilder::backward_weight(int mb, int chunk, bool sync_gradients) {
  const int n = layers(chunk);
  const bool buckets = sync_gradients && dp_ > 1;
  const int last = runs_head(chunk) ? 1 : 0;
  if ((per_layer_ || buckets) && n > 0) {
    for (int l = n - 1; l >= 0; --l) {
      const double head = l == n - 1 ? last * head_.logits_weight_bwd : 0.0;
      push(compute(OpKind::backward_weight, mb, chunk, l, 1, layer_[moe(chunk, l)].backward_weight() + head));
      if (buckets) layer_buckets(chunk, l);
    }
    return;
  }
  const LayerMix mix = job_.chunk_mix(stage_, chunk, 0, n);
  push(compute(OpKind::backward_weight, mb, chunk, -1, n,
               mix.dense * layer_[0].backward_weight() + mix.moe * layer_[1].backward_weight() +
                   last * head_.logits_weight_bwd));
  if (buckets && n == 0) extra_buckets(chunk);
}

void ProgramBuilder::backward_chunk(int mb, int chunk) {
  const Checkpointing policy = pc_.activation_checkpointing;
  const int ckpt = checkpointed(chunk);
  const LayerMix k = job_.chunk_mix(stage_, chunk, 0, ckpt), mix = job_.chunk_mix(stage_, chunk, 0, layers(chunk));
  const double recompute = k.dense * layer_[0].recompute(policy) + k.moe * layer_[1].recompute(policy);
  if (recompute > 0 && ckpt > 0) {
    compute_with_collectives(compute(OpKind::recompute, mb, chunk, -1, ckpt, recompute),
                             {{&layer_comm_[0].recompute, k.dense}, {&layer_comm_[1].recompute, k.moe}});
  }
  const int first = first_model_stage(chunk) ? 1 : 0, last = runs_head(chunk) ? 1 : 0;
  const std::initializer_list<Part> parts = {{&head_comm_.backward, last},
                                             {&layer_comm_[0].backward, mix.dense},
                                             {&layer_comm_[1].backward, mix.moe},
                                             {&embedding_comm_.backward, first}};
  compute_with_collectives(compute(OpKind::backward, mb, chunk, -1, layers(chunk),
                                   mix.dense * backward_seconds(false) + mix.moe * backward_seconds(true) +
                                       first * head_.embedding_bwd + last * head_backward_seconds()),
                           parts);
}

}  // namespace partune::detail
