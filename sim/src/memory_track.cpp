#include "memory_track.hpp"

#include <algorithm>

#include "partune/costmodel/schedule.hpp"

namespace partune::sim {

MemoryTrack::MemoryTrack(const Job& job, int stage, double static_bytes, const ActivationSizes& sizes)
    : job_(job),
      stage_(stage),
      chunks_(job.parallel.virtual_stages),
      head_first_(job.lm_head_on_first_stage()),
      head_stage_rank_(stage == job.lm_head_stage()),
      split_(splits_backward(job.parallel.pipeline)),
      sizes_(sizes),
      static_(static_bytes),
      peak_(static_bytes) {}

void MemoryTrack::change(double delta) {
  live_ += delta;
  peak_ = std::max(peak_, static_ + live_);
}

// What a compute instruction's layers keep for backward: each chunk's first
// checkpointed_layers_in_chunk layers are checkpointed, the others keep everything.
// Each layer at its kind's bytes (a dense layer of a mixture of experts keeps less or more
// than one with experts).
double MemoryTrack::stored_bytes(const Instruction& in) const {
  const int ckpt = job_.checkpointed_layers_in_chunk(stage_, in.chunk);
  if (in.layer >= 0) {
    const LayerMix one = job_.chunk_mix(stage_, in.chunk, in.layer, 1);
    return (in.layer < ckpt ? sizes_.stored_checkpointed : sizes_.stored_full).of(one);
  }
  if (in.layers == 0) return 0.0;  // the head alone
  const int n = job_.layers_in_chunk(stage_, in.chunk);
  return sizes_.stored_checkpointed.of(job_.chunk_mix(stage_, in.chunk, 0, ckpt)) +
         sizes_.stored_full.of(job_.chunk_mix(stage_, in.chunk, ckpt, n - ckpt));
}

// The LM head's logits live on the last model chunk only (its last layer), or with a
// head on stage 0 from the head's forward to its backward (the head's instructions carry
// chunk = virtual_stages there).
bool MemoryTrack::holds_logits(const Instruction& in) const {
  if (!head_stage_rank_) return false;
  if (head_first_) return in.chunk == chunks_;
  return in.chunk == chunks_ - 1 && (in.layer < 0 || in.layer == job_.layers_in_chunk(stage_, in.chunk) - 1);
}

double MemoryTrack::weight_held_of(const Instruction& in) const {
  const LayerMix mix = in.layer >= 0 ? job_.chunk_mix(stage_, in.chunk, in.layer, 1)
                                     : job_.chunk_mix(stage_, in.chunk, 0, job_.layers_in_chunk(stage_, in.chunk));
  return sizes_.weight_held.of(mix);
}

void MemoryTrack::compute_done(const Instruction& in) {
  const std::pair<int, int> mb{in.microbatch, in.chunk};
  if (in.kind == OpKind::forward || in.kind == OpKind::backward) {
    // The logits go with the head's backward, which runs before the recompute of the
    // layer beneath it: released there already if that layer was recomputed.
    const bool logits = holds_logits(in) && !(in.kind == OpKind::backward && logits_released_.erase(mb));
    const double bytes = stored_bytes(in) + (logits ? sizes_.logits : 0);
    change(in.kind == OpKind::forward ? bytes : -bytes);
    // A split backward keeps what its W needs until that W runs.
    if (in.kind == OpKind::backward && split_) change(weight_held_of(in));
  }
  if (in.kind == OpKind::backward_weight) change(-weight_held_of(in));
  if (in.kind == OpKind::recompute && holds_logits(in) && sizes_.logits > 0 && logits_released_.insert(mb).second)
    change(-sizes_.logits);
  // Recomputing a checkpointed layer materialises what it did not keep.
  if (in.kind == OpKind::recompute && sizes_.working > 0) peak_ = std::max(peak_, static_ + live_ + sizes_.working);
}

bool MemoryTrack::is_bucket(const Instruction& in) {
  return in.async && (in.kind == OpKind::all_reduce || in.kind == OpKind::reduce_scatter) &&
         (in.group == CommGroup::data || in.group == CommGroup::sharded || in.group == CommGroup::expert_data);
}

void MemoryTrack::bucket_issued(int index, double bytes) {
  change(bytes);
  buckets_live_[index] = bytes;
}

void MemoryTrack::bucket_completed(int index) { completed_buckets_.push_back(index); }

void MemoryTrack::bucket_awaited(int index) {
  if (auto b = buckets_live_.find(index); b != buckets_live_.end()) {
    change(-b->second);
    buckets_live_.erase(b);
  }
}

// The backend copies a finished bucket's result out at the first instruction boundary
// after its completion; buckets that completed together are freed in issue order.
void MemoryTrack::release_completed_buckets() {
  std::sort(completed_buckets_.begin(), completed_buckets_.end());
  for (int index : completed_buckets_) bucket_awaited(index);
  completed_buckets_.clear();
}

void MemoryTrack::offload_issued(int index, const Instruction& in) {
  offload_pending_[key_of(in)] = {index, in.bytes};
}

void MemoryTrack::offload_completed(int index, const Instruction& in) {
  completed_offloads_.emplace_back(key_of(in), index);
}

void MemoryTrack::offload_awaited(const Instruction& in) {
  const CopyKey key = key_of(in);
  if (auto it = offload_pending_.find(key); it != offload_pending_.end()) {
    change(-it->second.second);
    offload_pending_.erase(it);
    offloaded_.insert(key);
  }
}

void MemoryTrack::reload_started(const Instruction& in) {
  // The device buffer is allocated when the copy starts; if the offload has not
  // finished, the activations never left.
  const CopyKey key = key_of(in);
  if (offloaded_.erase(key)) change(in.bytes);
  else offload_pending_.erase(key);
}

// Copies that completed together leave in (micro-batch, chunk, layer) order; a copy whose
// activations were reloaded before it completed changes nothing.
void MemoryTrack::release_completed_offloads() {
  std::sort(completed_offloads_.begin(), completed_offloads_.end());
  for (const auto& [key, index] : completed_offloads_) {
    auto it = offload_pending_.find(key);
    if (it == offload_pending_.end() || it->second.first != index) continue;
    change(-it->second.second);
    offload_pending_.erase(it);
    offloaded_.insert(key);
  }
  completed_offloads_.clear();
}

}  // namespace partune::sim
